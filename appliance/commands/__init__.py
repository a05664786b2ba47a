"""The ``appliance`` command line: the parser and dispatch (:mod:`.main`) and one module per command."""
