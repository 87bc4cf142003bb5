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
import subprocess
import sys
import textwrap

import testtools

import cinder_forcedetach

PACKAGE_DIR = os.path.dirname(cinder_forcedetach.__file__)
REPO_ROOT = os.path.dirname(PACKAGE_DIR)
NOT_SHIPPED = ('devbox', 'tests', 'tools', 'benchmarks')
# Top-level modules of test-requirements.txt (the developers' venv has
# them, a Cinder node need not) and of the conformance extra.
TEST_ONLY = ('etcd3gw', 'ddt', 'stestr', 'hypothesis', 'nova', 'neutron',
             'neutron_lib', 'keystone', 'glance', 'placement', 'tempest',
             'cinder_tempest_plugin', 'gunicorn', 'pymysql', 'reno',
             'hacking', 'openstackclient', 'selenium')
CONFORMANCE_EXTRA = ('fixtures', 'testtools')
# What the OpenStackClient plugin's commands import: there whenever
# ``openstack`` (python-openstackclient, in test-requirements.txt) is.
OSC = ('openstackclient', 'osc_lib', 'cliff')
# What the Horizon plugin's panel imports: there wherever Horizon runs
# (horizon, in test-requirements.txt, for the browser test).
DASHBOARD = ('horizon', 'openstack_dashboard', 'django')
# Import every module of the package with TEST_ONLY, CONFORMANCE_EXTRA and
# NOT_SHIPPED unimportable; print "module<TAB>error" for each that fails.
IMPORT_ALL = textwrap.dedent("""
    import importlib, importlib.abc, pkgutil, sys
    BLOCKED = set(sys.argv[1].split(','))

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split('.')[0] in BLOCKED:
                raise ImportError('blocked: ' + name)

    sys.meta_path.insert(0, Block())
    import cinder_forcedetach
    for module in pkgutil.walk_packages(cinder_forcedetach.__path__,
                                        'cinder_forcedetach.'):
        if module.name.endswith('__main__'):
            continue
        try:
            importlib.import_module(module.name)
        except Exception as err:
            print('%s\t%s' % (module.name, err))
""")


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
        # The CLI, the options, the OpenStackClient plugin module and its
        # three commands.
        self.assertEqual(6, len(targets))
        for target in targets:
            module, _sep, attribute = target.partition(':')
            self.assertEqual('cinder_forcedetach',
                             module.split('.')[0], target)
            loaded = importlib.import_module(module)
            if not attribute:   # openstack.cli.extension names a module
                self.assertEqual(['openstack.cli.extension'], [
                    g for g in entry_points if target in entry_points[g]])
                self.assertTrue(callable(loaded.make_client), target)
                continue
            self.assertTrue(callable(getattr(loaded, attribute)), target)

    def test_the_package_imports_without_the_test_requirements(self):
        """What the CLI and the drivers import is in requirements.txt.

        tooz imported its etcd3gw driver's client at module level from the
        flow: from the wheel alone the CLI failed to start.  Only the
        conformance kit needs more (``cinder-forcedetach[conformance]``),
        and the OpenStackClient plugin's commands what ``openstack`` brings
        (its plugin module imports without), the Horizon plugin's panel
        what Horizon brings (its package, enabled files and findings import
        without).
        """
        blocked = (TEST_ONLY + CONFORMANCE_EXTRA + OSC + DASHBOARD +
                   NOT_SHIPPED)
        run = subprocess.run(
            [sys.executable, '-c', IMPORT_ALL, ','.join(blocked)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        self.assertEqual(0, run.returncode, run.stderr[-2000:])
        failed = dict(line.split('\t', 1)
                      for line in run.stdout.splitlines())
        panel = 'cinder_forcedetach.dashboard.volume_attachments.'
        self.assertEqual(['cinder_forcedetach.conformance.harness',
                          'cinder_forcedetach.conformance.runner',
                          'cinder_forcedetach.conformance.suite',
                          'cinder_forcedetach.dashboard.api',
                          'cinder_forcedetach.dashboard.overrides'] +
                         [panel + name for name in (
                             'forms', 'panel', 'tables', 'urls', 'views')] +
                         ['cinder_forcedetach.osc.v1.volume'],
                         sorted(failed), failed)
        for module, error in failed.items():
            self.assertIn(error.split()[-1].split('.')[0],
                          OSC if '.osc.' in module else DASHBOARD
                          if '.dashboard.' in module else CONFORMANCE_EXTRA,
                          module)
