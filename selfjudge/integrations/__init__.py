"""Adapters that put this package's verify op and judge inside other serving engines."""
