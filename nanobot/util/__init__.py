"""Small shared helpers used across nanobot: files (`fs`), retries (`retry`), text (`text`), tool
arguments (`tool_args`). Each module is dependency-free and has one concern."""
