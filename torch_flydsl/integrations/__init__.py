"""Integrations with serving frameworks. Each is opt-in and imported only by its entry point."""
