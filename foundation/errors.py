"""The one exception type for mistakes a user can fix (bad flag, bad file, missing input)."""


class UserError(Exception):
    """A problem with the user's input; its message is a single line that names the file or flag."""
