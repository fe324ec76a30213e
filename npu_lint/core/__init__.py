"""Core types and helpers shared by everything: diagnostics, source files, configuration, discovery, AST helpers."""
