"""Value classes written out rather than as dataclasses (docs/design.md#startup).

:mod:`dataclasses` imports inspect (and with it ast, dis and tokenize), and building each
class execs its generated methods: on the path of a command a user waits for, such as
``memoryd recall`` over another agent's sessions, that is a tenth of the command's wall
time. A class on such a path derives from :class:`Value`, names its attributes in
``__slots__`` and sets them in ``__init__``; it is then compared, hashed and shown as a
dataclass with the same fields would be.
"""

from __future__ import annotations


class Value:
    """Equal to a value of the same class whose attributes are equal, hashed and shown by
    them: the attributes ``__slots__`` names, in order (a dataclass's ``__eq__``,
    ``__hash__`` and ``__repr__``). A class whose attributes change sets ``__hash__`` to
    None, as a dataclass that is not frozen has it."""

    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Value) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__qualname__}({shown})"
