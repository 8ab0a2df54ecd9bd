"""placeholder"""


def add_parser(sub) -> None:
    p = sub.add_parser("import-hf")
    p.set_defaults(run=lambda args: 1)
