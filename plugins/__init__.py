"""Built-in dataset, metric and op plugins of npuopt (installed as `npuopt_plugins`).

These files are loaded by path, exactly as a user's plugin folder is.
"""
