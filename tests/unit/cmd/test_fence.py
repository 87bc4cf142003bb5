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

"""``cinder-forcedetach fence list|lift``: parsing, backends, exit codes.

The commands run in a subprocess, as an operator runs them, against a
cinder.conf written here (loading Cinder's configuration is process-wide).
Listing and lifting real fences is in tests/functional/test_rbd.py.
"""

import io
import os
import subprocess
import sys

import ddt
import fixtures
import testtools

from cinder_forcedetach.cmd import errors
from cinder_forcedetach.cmd import manage

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
TGT = 'cinder_forcedetach.drivers.iscsi.TgtISCSIDriver'


@ddt.ddt
class FenceCliTestCase(testtools.TestCase):

    def setUp(self):
        super(FenceCliTestCase, self).setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def conf(self, backends=('tgt',)):
        path = os.path.join(self.tmp, 'cinder.conf')
        with open(path, 'w') as f:
            f.write('[DEFAULT]\nstate_path = %s\nenabled_backends = %s\n'
                    '[database]\nconnection = sqlite:///%s/cinder.sqlite\n'
                    % (self.tmp, ','.join(backends), self.tmp))
            for name in backends:
                f.write('[%s]\nvolume_driver = %s\n'
                        'forcedetach_volumes_dir = %s/%s\n' % (
                            name, TGT, self.tmp, name))
        return path

    def cli(self, *args):
        env = dict(os.environ, PYTHONPATH=REPO)
        return subprocess.run(
            [sys.executable, '-m', 'cinder_forcedetach.cmd.manage'] +
            list(args), env=env, cwd=REPO, capture_output=True, text=True,
            timeout=120)

    @ddt.data(['fence'], ['fence', 'lift'],
              ['fence', 'lift', '--volume', 'v', '--address', 'a'],
              ['fence', 'list', '--nosuch'])
    def test_usage_errors(self, argv):
        err = io.StringIO()
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', err))
        self.assertEqual(errors.EXIT_USAGE, manage.main(argv))
        self.assertIn('error:', err.getvalue())

    def test_missing_config_file(self):
        res = self.cli('fence', 'list', '--config-file',
                       os.path.join(self.tmp, 'absent.conf'))
        self.assertEqual(errors.EXIT_USAGE, res.returncode, res.stderr)
        self.assertIn('cannot load the configuration', res.stderr)

    def test_backend_that_does_not_fence(self):
        res = self.cli('fence', 'list', '--config-file', self.conf())
        self.assertEqual(errors.EXIT_USAGE, res.returncode, res.stderr)
        self.assertIn('the driver of backend tgt (TgtISCSIDriver) does not '
                      'fence clients', res.stderr)

    def test_several_backends_need_a_name(self):
        res = self.cli('fence', 'list', '--config-file',
                       self.conf(('tgt', 'tgt2')))
        self.assertEqual(errors.EXIT_USAGE, res.returncode, res.stderr)
        self.assertIn('name one with --backend', res.stderr)
        res = self.cli('fence', 'lift', '--address', '127.0.0.1:0/1',
                       '--backend', 'tgt2', '--config-file',
                       self.conf(('tgt', 'tgt2')))
        self.assertIn('backend tgt2 (TgtISCSIDriver) does not fence',
                      res.stderr)

    def test_unknown_backend(self):
        res = self.cli('fence', 'list', '--backend', 'rbd', '--config-file',
                       self.conf())
        self.assertEqual(errors.EXIT_NOT_FOUND, res.returncode, res.stderr)
        self.assertIn('backend rbd is not enabled in cinder.conf '
                      '(enabled_backends: tgt)', res.stderr)
