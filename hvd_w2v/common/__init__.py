"""What every part shares: the training configuration (config: Config, the frozen value built once by the
command line and passed explicitly), the user error (errors), the messages' wording (wording), rank 0's
progress display (progress) and the version (version).

May import: nothing of hvd_w2v outside this package.
"""
