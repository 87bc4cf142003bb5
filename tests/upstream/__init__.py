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
behaviour we replace on purpose) is listed, with its reason, in this
package's ``differences.txt``; :func:`mark_differences` makes it an
expected failure, so it is counted and shown apart, and a listed test
that passes is an unexpected success: a failure of the run, which keeps
the list true.
"""

import functools
import importlib
import os
import sys
import types
import unittest

import testtools
import testtools.content

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


def read_differences(path=DIFFERENCES):
    """``{test id: reason}`` from *path*: ``<test id>  # <reason>`` lines."""
    differences = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith('#'):
                continue
            test_id, sep, reason = line.partition('#')
            if not sep or not reason.strip():
                raise ValueError('%s: no reason given for %s' % (
                    path, test_id.strip()))
            differences[test_id.strip()] = reason.strip()
    return differences


def _expect_failure(method, reason):
    @functools.wraps(method)
    def expected_to_fail(self, *args, **kwargs):
        try:
            method(self, *args, **kwargs)
        except unittest.SkipTest:
            raise
        except Exception:
            self.addDetail('intended difference',
                           testtools.content.text_content(reason))
            raise testtools.testcase._ExpectedFailure(sys.exc_info())
        raise testtools.testcase._UnexpectedSuccess(
            'listed in differences.txt but passed: %s' % reason)
    return expected_to_fail


def mark_differences(module, prefix, differences=None):
    """Make the listed tests of *module* expected failures.

    *prefix* is the test id prefix of *module*'s classes as stestr names
    them (``tests.upstream.test_rbd``).  A listed id that names no test is
    an error: the list must not rot.
    """
    differences = read_differences() if differences is None else differences
    unknown = []
    for test_id, reason in differences.items():
        if not test_id.startswith(prefix + '.'):
            continue
        class_name, _sep, method_name = test_id[len(prefix) + 1:].partition(
            '.')
        cls = getattr(module, class_name, None)
        method = getattr(cls, method_name, None) if cls else None
        if method is None:
            unknown.append(test_id)
            continue
        setattr(cls, method_name, _expect_failure(method, reason))
    if unknown:
        raise ValueError('differences.txt lists tests that do not exist: '
                         '%s' % ', '.join(sorted(unknown)))
