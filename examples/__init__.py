"""Example projects that scalescope trains without knowing them (see the README)."""
