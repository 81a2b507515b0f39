"""Tools for trying waitprep against engines: ``waitprep.testing.producer``, a table's producer in a
process of its own that writes arena records, publishes, evicts and reaps on command."""
