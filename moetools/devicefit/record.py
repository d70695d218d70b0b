"""A plain record class for device-fit's data: keyword (or positional) fields with defaults.

The header path does not import dataclasses (about 13 ms of start-up on this machine), so device-fit's
small value types derive from `Record` and list their fields as data.
"""

REQUIRED = object()


class Record:
    """Subclasses set FIELDS = (("name", default), ...); REQUIRED marks a field without default and a
    default that is a type (list, dict, a Record) is called for each instance."""

    FIELDS = ()

    def __init__(self, *args, **values):
        names = [name for name, _ in self.FIELDS]
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes at most {len(names)} positional fields")
        for name, value in zip(names, args):
            if name in values:
                raise TypeError(f"{type(self).__name__} got field {name!r} twice")
            values[name] = value
        for name, default in self.FIELDS:
            if name in values:
                setattr(self, name, values.pop(name))
            elif default is REQUIRED:
                raise TypeError(f"{type(self).__name__} needs field {name!r}")
            else:
                setattr(self, name, default() if isinstance(default, type) else default)
        if values:
            raise TypeError(f"{type(self).__name__} has no field(s) {', '.join(sorted(values))}")

    def replace(self, **changes):
        """A new record of the same type: these fields changed, every other one as it is here (the values
        themselves are shared, not copied)."""
        values = {name: getattr(self, name) for name, _ in self.FIELDS}
        values.update(changes)
        return type(self)(**values)

    def as_tuple(self):
        return tuple(getattr(self, name) for name, _ in self.FIELDS)

    def __eq__(self, other):
        return type(other) is type(self) and other.as_tuple() == self.as_tuple()

    def __repr__(self):
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name, _ in self.FIELDS)
        return f"{type(self).__name__}({inner})"
