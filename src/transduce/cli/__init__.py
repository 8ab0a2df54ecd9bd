"""The ``transduce`` command line: one module per subcommand."""
