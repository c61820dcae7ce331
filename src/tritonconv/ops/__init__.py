"""Launchers: validate → allocate → pick the grid → launch. One module per op family."""
