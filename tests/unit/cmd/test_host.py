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

"""``cinder-forcedetach host fence``: parsing, hostile hosts, exit codes.

The command runs in a subprocess, as an operator runs it, against a
cinder.conf written here.  Fencing real hosts (live librbd clients and
iSCSI sessions) is in tests/functional/test_rbd_host_fence.py and in the
conformance kit's R9.
"""

import io
from unittest import mock

import ddt
import fixtures
import testtools

from cinder_forcedetach.cmd import errors
from cinder_forcedetach.cmd import host
from cinder_forcedetach.cmd import manage
from tests.unit.cmd import test_fence


@ddt.ddt
class HostFenceCliTestCase(testtools.TestCase):

    def setUp(self):
        super(HostFenceCliTestCase, self).setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path

    # cinder.conf with tgt backends, and the command in a subprocess.
    conf = test_fence.FenceCliTestCase.conf
    cli = test_fence.FenceCliTestCase.cli

    @ddt.data(['host'], ['host', 'fence'],
              ['host', 'fence', 'compute1', '--nosuch'])
    def test_usage_errors(self, argv):
        err = io.StringIO()
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', err))
        self.assertEqual(errors.EXIT_USAGE, manage.main(argv))
        self.assertIn('error:', err.getvalue())

    @ddt.data('compute1\ninitiator-address=ALL', 'ALL,x', '-', 'a b',
              'x' * 300, '')
    def test_hostile_host_refused_before_anything(self, name):
        res = self.cli('host', 'fence', name, '--config-file', self.conf())
        self.assertEqual(errors.EXIT_USAGE, res.returncode, res.stderr)
        self.assertIn('HOST must be a host name or an IP address',
                      res.stderr)

    def test_unknown_backend(self):
        res = self.cli('host', 'fence', 'compute1', '--backend', 'nosuch',
                       '--config-file', self.conf())
        self.assertEqual(errors.EXIT_NOT_FOUND, res.returncode, res.stderr)
        self.assertIn('backend nosuch is not enabled', res.stderr)


class ConnectorKeyTestCase(testtools.TestCase):

    def test_one_fence_per_way_the_host_is_named(self):
        a = {'host': 'c1', 'ip': '10.0.0.1', 'initiator': 'iqn.x:c1',
             'multipath': False}
        self.assertEqual(host._connector_key(a), host._connector_key(
            dict(a, multipath=True, platform='x86_64')))
        self.assertNotEqual(host._connector_key(a), host._connector_key(
            dict(a, ip='10.0.0.2')))


class FenceBackendTestCase(testtools.TestCase):
    """A backend that fails as a whole fails its own rows, not the run."""

    def setUp(self):
        super(FenceBackendTestCase, self).setUp()
        volume = mock.Mock(id='v1')
        att = mock.Mock(id='a1', connector={'host': 'compute1'},
                        attach_time=1, created_at=0)
        self.useFixture(fixtures.MockPatchObject(
            host, 'held_by', return_value={'v1': (volume, [att])}))
        self.build = self.useFixture(fixtures.MockPatchObject(
            host.local, 'command_driver')).mock
        self.args = mock.Mock(host='compute1', dry_run=False, ip_wide=True)

    def rows(self):
        return host._fence_backend('ctxt', self.args, 'rbd-1', 'h@rbd-1',
                                   None)

    def test_driver_cannot_be_built(self):
        self.build.side_effect = RuntimeError('no keyring at /etc/x')
        [row] = self.rows()
        self.assertEqual((host.FAILED, 'RuntimeError: no keyring at /etc/x'),
                         (row['result'], row['error']))

    def test_driver_cannot_fence(self):
        self.build.return_value = object()
        [row] = self.rows()
        self.assertEqual(host.FAILED, row['result'])
        self.assertIn('cannot fence a host', row['error'])

    def test_fence_refused_as_a_whole(self):
        from cinder import exception

        self.build.return_value.fence_host.side_effect = (
            exception.InvalidInput(reason='RBDDriver cannot fence a host\'s '
                                          'whole address (ip_wide)'))
        [row] = self.rows()
        self.assertEqual(host.FAILED, row['result'])
        # Cinder's message, formatted.
        self.assertEqual('InvalidInput: Invalid input received: RBDDriver '
                         'cannot fence a host\'s whole address (ip_wide)',
                         row['error'])
        self.assertEqual([], row['fenced'])

    def test_fenced(self):
        self.build.return_value.fence_host.return_value = mock.Mock(
            done={'v1': ['10.0.0.5:0/7']}, failed={})
        [row] = self.rows()
        self.assertEqual((host.FENCED, ['10.0.0.5:0/7'], ['a1'], ''),
                         (row['result'], row['fenced'], row['attachments'],
                          row['error']))
