#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""Upstream Cinder's own driver tests, run against our drop-in drivers.

The ``cinder`` wheel ships its unit tests (``cinder/tests/unit/...``).
:func:`load_upstream` imports one of those modules with the name it uses
for the driver module (``import cinder.volume.drivers.rbd as driver``)
bound to a view of the real module in which the driver class is ours, so
every ``driver.RBDDriver(...)`` and ``mock.patch.object(driver.RBDDriver,
...)`` in upstream's tests builds and patches our class.  Everything else
read, set or deleted through that view (``mock.patch.object(driver,
'RADOSClient')``) reaches the real module, which upstream's code reads.
The real module's globals are never changed: upstream's
``super(RBDDriver, self)`` still names upstream's class, so our subclass
does not recurse.

A test that is meant to fail against our class (it asserts upstream
behaviour we replace on purpose) is listed in this package's
``differences.txt`` with the exception it fails with (its type and a
fragment of its message) and its reason; :func:`mark_differences` makes
it an expected failure only when it fails with that very exception, so
it is counted and shown apart.  A listed test that fails otherwise fails
(its own error, and what the list expected), one that passes is an
unexpected success (a failure of the run), and an id that names no test
of the upstream modules tests/upstream/test_*.py load is an error at
import: the list stays true.
"""

import ast
import collections
import functools
import glob
import importlib
import os
import sys
import types
import unittest

import testtools
import testtools.content

from tests.support import id_lists

DIFFERENCES = os.path.join(os.path.dirname(__file__), 'differences.txt')


class _DriverModuleView(types.ModuleType):
    """A module whose names are the real module's, except a few."""

    def __init__(self, real, overrides):
        super(_DriverModuleView, self).__init__(real.__name__, real.__doc__)
        object.__setattr__(self, '_real', real)
        object.__setattr__(self, '_overrides', dict(overrides))

    def __getattr__(self, name):
        overrides = object.__getattribute__(self, '_overrides')
        if name in overrides:
            return overrides[name]
        return getattr(object.__getattribute__(self, '_real'), name)

    def __setattr__(self, name, value):
        overrides = object.__getattribute__(self, '_overrides')
        if name in overrides:
            overrides[name] = value
        else:
            setattr(object.__getattribute__(self, '_real'), name, value)

    def __delattr__(self, name):
        delattr(object.__getattribute__(self, '_real'), name)


def load_upstream(test_module, driver_module, **classes):
    """Import upstream's *test_module* with our *classes* in *driver_module*.

    :returns: the test module, imported anew (a previously imported copy
        is replaced), its ``driver_module`` seen through a view whose
        *classes* (name=our class) are ours.  In this process the view
        stays the package's attribute and ``sys.modules``' entry, so that
        ``mock.patch('...rbd.RBDDriver._x')`` patches our class too; the
        real module's own globals (what upstream's code reads) are
        unchanged.
    """
    real = importlib.import_module(driver_module)
    view = _DriverModuleView(real, classes)
    package_name, _sep, attr = driver_module.rpartition('.')
    package = importlib.import_module(package_name)
    sys.modules.pop(test_module, None)
    # ``import a.b.rbd as driver`` reads the attribute of the package,
    # mock.patch's name lookup (pkgutil.resolve_name) sys.modules.
    setattr(package, attr, view)
    sys.modules[driver_module] = view
    return importlib.import_module(test_module)


Difference = collections.namedtuple('Difference',
                                    'exc_type fragment reason')


def parse_expected(text):
    """``(type name, fragment)`` from ``<ExceptionType>: <fragment>``.

    The type is the exception class's name (``AssertionError``,
    ``VolumeNotFound``) or its dotted path; the fragment, a part of the
    exception's message (``str(exc)``), must not be empty.
    """
    exc_type, sep, fragment = text.partition(':')
    exc_type, fragment = exc_type.strip(), fragment.strip()
    if (not sep or not fragment or not exc_type or
            not all(part.isidentifier() for part in exc_type.split('.'))):
        raise ValueError('expected "<ExceptionType>: <message fragment>", '
                         'got %r' % text)
    return exc_type, fragment


def parse_differences(lines, path=DIFFERENCES):
    """``{test id: Difference}`` from ``differences.txt``'s *lines*.

    A line is ``<test id> | <ExceptionType>: <message fragment> |
    <reason>``; blank lines and ``#`` comments are skipped.  A line
    without the three fields, an empty reason or a test listed twice is
    an error (ValueError naming *path* and the line number).
    """
    differences = {}
    for where, test_id, expected, reason in id_lists.read_id_lines(
            lines, path, '<test id> | <ExceptionType>: <message fragment> '
                         '| <reason>'):
        try:
            exc_type, fragment = parse_expected(expected)
        except ValueError as e:
            raise ValueError('%s: %s: %s' % (where, test_id, e))
        differences[test_id] = Difference(exc_type, fragment, reason)
    return differences


def read_differences(path=DIFFERENCES):
    """``{test id: Difference}`` from the file *path*."""
    with open(path) as f:
        return parse_differences(f, path)


def upstream_modules(directory=os.path.dirname(os.path.abspath(__file__))):
    """The upstream test modules *directory*'s ``test_*.py`` load.

    Each names its module in a module-level ``UPSTREAM = '<module>'``;
    read from the source (no import), so that any of them can check ids
    of the others.
    """
    modules = set()
    for path in sorted(glob.glob(os.path.join(directory, 'test_*.py'))):
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in tree.body:
            if (isinstance(node, ast.Assign) and
                    isinstance(node.value, ast.Constant) and
                    isinstance(node.value.value, str) and
                    any(isinstance(t, ast.Name) and t.id == 'UPSTREAM'
                        for t in node.targets)):
                modules.add(node.value.value)
    return modules


def foreign_ids(differences, modules):
    """The listed ids that belong to none of the upstream *modules*."""
    return sorted(test_id for test_id in differences
                  if not any(test_id.startswith(module + '.')
                             for module in modules))


def matches(difference, exc):
    """Whether *exc* is the failure *difference* expects.

    Same class (by name, or by dotted ``module.qualname``) and the
    fragment is part of ``str(exc)``.
    """
    cls = type(exc)
    names = {cls.__name__, cls.__qualname__,
             '%s.%s' % (cls.__module__, cls.__qualname__)}
    return difference.exc_type in names and difference.fragment in str(exc)


def describe(exc):
    """``<ExceptionType>: <message>`` of *exc*, as differences.txt has it."""
    return '%s: %s' % (type(exc).__name__, exc)


def _expect_failure(method, difference):
    text_content = testtools.content.text_content

    @functools.wraps(method)
    def expected_to_fail(self, *args, **kwargs):
        try:
            method(self, *args, **kwargs)
        except unittest.SkipTest:
            raise
        except Exception as exc:
            if not matches(difference, exc):
                self.addDetail('differences.txt', text_content(
                    'listed as failing with "%s: %s" (%s) but failed with '
                    '"%s"' % (difference.exc_type, difference.fragment,
                              difference.reason, describe(exc))))
                raise
            self.addDetail('intended difference',
                           text_content(difference.reason))
            raise testtools.testcase._ExpectedFailure(sys.exc_info())
        raise testtools.testcase._UnexpectedSuccess(
            'listed in differences.txt but passed: %s' % difference.reason)
    return expected_to_fail


def mark_differences(module, prefix, differences=None, modules=None):
    """Make the listed tests of *module* expected failures.

    *prefix* is the test id prefix of *module*'s classes as stestr names
    them (the upstream module's name).  Every id of the list is checked,
    not only *module*'s: an id under *prefix* that names no test of
    *module*, or an id under none of the upstream *modules* (default:
    :func:`upstream_modules`), is an error: the list must not rot.
    """
    differences = read_differences() if differences is None else differences
    modules = upstream_modules() if modules is None else set(modules)
    unknown = foreign_ids(differences, modules | {prefix})
    for test_id, difference in differences.items():
        if not test_id.startswith(prefix + '.'):
            continue
        class_name, _sep, method_name = test_id[len(prefix) + 1:].partition(
            '.')
        cls = getattr(module, class_name, None)
        method = getattr(cls, method_name, None) if cls else None
        if method is None or '.' in method_name:
            unknown.append(test_id)
            continue
        setattr(cls, method_name, _expect_failure(method, difference))
    if unknown:
        raise ValueError('differences.txt lists tests that do not exist: '
                         '%s' % ', '.join(sorted(unknown)))
