"""Example projects that scalescope trains without knowing them (see docs/your-module.md)."""
