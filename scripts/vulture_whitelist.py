"""Names vulture reports as unused that are used from outside our code (scripts/test.sh passes this
file to `vulture nanobot --min-confidence 80`). Only real false positives belong here."""
# ruff: noqa: B018, F821

# pydantic-settings calls Config.settings_customise_sources with these keyword arguments.
settings_cls
dotenv_settings
file_secret_settings
