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

"""What the wheel a Cinder node installs carries, read from its sources.

``setup.cfg`` ships the ``cinder_forcedetach`` package alone; the developer
box (``devbox/``, a distribution of its own), the tests and the scripts
stay in the repository.  A module of the package that imported one of them
would fail on a Cinder node, and an entry point into them would be
registered in every installation.
"""

import ast
import configparser
import importlib
import os

import testtools

import cinder_forcedetach

PACKAGE_DIR = os.path.dirname(cinder_forcedetach.__file__)
REPO_ROOT = os.path.dirname(PACKAGE_DIR)
NOT_SHIPPED = ('devbox', 'tests', 'tools', 'benchmarks')


def package_modules():
    """(dotted name, path) of every module of the package."""
    for directory, _dirs, files in os.walk(PACKAGE_DIR):
        for name in sorted(files):
            if name.endswith('.py'):
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, REPO_ROOT)[:-3]
                yield relative.replace(os.sep, '.'), path


def imported_names(path):
    """Every module name an import statement of *path* names."""
    with open(path) as source:
        tree = ast.parse(source.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


class PackageShapeTestCase(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.setup_cfg = configparser.ConfigParser()
        self.setup_cfg.read(os.path.join(REPO_ROOT, 'setup.cfg'))

    def test_the_wheel_ships_the_package_alone(self):
        self.assertEqual(['cinder_forcedetach'],
                         self.setup_cfg['files']['packages'].split())

    def test_no_module_imports_what_the_wheel_lacks(self):
        leaks = ['%s imports %s' % (module, name)
                 for module, path in package_modules()
                 for name in imported_names(path)
                 if name.split('.')[0] in NOT_SHIPPED]
        self.assertEqual([], leaks)

    def test_every_entry_point_is_in_the_package_and_loads(self):
        entry_points = self.setup_cfg['entry_points']
        targets = [line.split('=', 1)[1].strip()
                   for group in entry_points
                   for line in entry_points[group].splitlines()
                   if '=' in line]
        self.assertEqual(2, len(targets))   # the CLI and the options
        for target in targets:
            module, _sep, attribute = target.partition(':')
            self.assertEqual('cinder_forcedetach',
                             module.split('.')[0], target)
            self.assertTrue(callable(getattr(
                importlib.import_module(module), attribute)), target)
