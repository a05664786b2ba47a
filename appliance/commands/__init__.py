"""The ``appliance`` command line: the parser and dispatch (:mod:`.main`) and one module per command.

Every command exits with an :class:`~appliance.exitcodes.ExitCode` and loads its config through
:func:`~appliance.commands.configload.load_and_report`.
"""
