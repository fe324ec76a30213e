"""Structural fixes (codemods) that are larger than a token edit."""
