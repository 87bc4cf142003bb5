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

"""The privileged tgtadm operations accept only arguments of their type."""

import ddt
import testtools

from cinder_forcedetach.privileged import tgt

IQN = 'iqn.2010-10.org.openstack:volume-1'
HOST = 'iqn.1994-05.com.example:a'


@ddt.ddt
class CommandsTestCase(testtools.TestCase):

    def test_each_operation_is_one_tgtadm_command(self):
        c = tgt.Commands
        prefix = ('tgtadm', '-C', '7', '--lld', 'iscsi', '--op')
        for argv, tail in (
                (c.show_targets(7), ('show', '--mode', 'target')),
                (c.show_target_names(7), ('show', '--mode', 'lld')),
                (c.show_connections(7, 3),
                 ('show', '--mode', 'conn', '--tid', '3')),
                (c.offline_target(7, 3),
                 ('update', '--mode', 'target', '--tid', '3', '--name',
                  'state', '--value', 'offline')),
                (c.bind_initiator(7, 3, HOST),
                 ('bind', '--mode', 'target', '--tid', '3',
                  '--initiator-name', HOST)),
                (c.unbind_address(7, 3, 'ALL'),
                 ('unbind', '--mode', 'target', '--tid', '3',
                  '--initiator-address', 'ALL')),
                (c.delete_target(7, 3),
                 ('delete', '--mode', 'target', '--tid', '3', '--force')),
                (c.new_lun(7, 3, 1, '/var/lib/cinder/volume-1'),
                 ('new', '--mode', 'logicalunit', '--tid', '3', '--lun',
                  '1', '--backing-store', '/var/lib/cinder/volume-1')),
                (c.delete_connection(7, 3, 12, 0),
                 ('delete', '--mode', 'conn', '--tid', '3', '--sid', '12',
                  '--cid', '0'))):
            self.assertEqual(prefix + tail, argv)

    @ddt.unpack
    @ddt.data(
        ('bind_initiator', (7, 1, HOST + ',initiator-address=ALL')),
        ('bind_initiator', (7, 1, HOST + '\nALL')),
        ('bind_initiator', (7, 1, 'ALL')),
        ('unbind_initiator', (7, 1, '')),
        ('new_target', (7, 1, IQN + ' x')),
        ('new_target', (7, '1', IQN)),
        ('new_target', (7, True, IQN)),
        ('new_target', (7, 0, IQN)),
        ('show_targets', (70000,)),
        ('show_targets', ('7; reboot',)),
        ('show_target_names', (-1,)),
        ('show_connections', (7, 0)),
        ('show_connections', (7, '1 --mode target')),
        ('offline_target', (7, True)),
        ('offline_target', (7, '1 --value ready')),
        ('new_lun', (7, 1, 1, 'relative/path')),
        ('new_lun', (7, 1, 1, '/v/a,bstype=sg')),
        ('new_lun', (7, 1, 1, '/v/a\npath=/dev/sda')),
        ('new_lun', (7, 1, 1, '/v/../../dev/sda')),
        ('new_lun', (7, 1, 0, '/v/a')),
        ('new_account', (7, 'user', 'pass word')),
        ('new_account', (7, 'user\n', 'password')),
        ('bind_account', (7, 1, '')),
        ('unbind_address', (7, 1, 'ALL,initiator-name=x')),
        ('unbind_address', (7, 1, 'any')),
        ('delete_connection', (7, 1, -1, 0)),
        ('delete_connection', (7, 1, 1, '0')),
    )
    def test_refused(self, operation, args):
        self.assertRaises(tgt.InvalidArgument,
                          getattr(tgt.Commands, operation), *args)

    def test_entrypoints_match_commands(self):
        """Every command has its entrypoint and nothing else runs tgtadm."""
        commands = {n for n in vars(tgt.Commands) if not n.startswith('_')}
        entrypoints = {n for n, f in vars(tgt).items()
                       if hasattr(f, 'privsep_entrypoint')}
        self.assertEqual(commands, entrypoints)
