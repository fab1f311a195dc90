"""Numbered SQL files of the journal schema, applied in order at open."""
