"""Exceptions raised by the emulator."""


class EmulatorError(RuntimeError):
    """The emulator cannot run this kernel faithfully (bad input, unsupported construct...)."""


class UnsupportedOp(EmulatorError):
    """An IR operation (or a variant of one) that the emulator has no semantics for.

    Raised at translation time, before anything runs, so an unsupported kernel never
    produces a silently wrong answer.
    """

    def __init__(self, op_name: str, detail: str = "", location: str = ""):
        self.op_name = op_name
        msg = f"unsupported op {op_name}"
        if detail:
            msg += f": {detail}"
        if location:
            msg += f" (at {location})"
        super().__init__(msg)
