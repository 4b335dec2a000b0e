"""The one exception type that means "the user's input is wrong" (as opposed to a bug)."""


class UserError(Exception):
    """Bad input or configuration. The command line prints the message alone and exits with code 2."""
