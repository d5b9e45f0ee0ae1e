"""The ``bernmf`` command: its parser (parser), one function per command (commands,
study_commands) and the multi-process launch (launch). The top layer: imports anything."""
