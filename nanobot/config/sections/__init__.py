"""The config sections, one module per top-level key; `nanobot.config.schema` assembles the root.

Every field carries a `description`: the generated reference (README table, docs/configuration.md,
`nanobot config schema`) is built from them, and a test fails when one is missing.
"""
