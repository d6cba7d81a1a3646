"""A package, so that its test files may share names with those of other folders (test_config.py, ...)."""
