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

"""tools/stack.sh's settings: backends, optional services, port checks."""

import argparse
import os
import subprocess
from unittest import mock

import ddt
import fixtures
import testtools

from devbox import services
from devbox.services import ceph
from devbox.services import cinder
from devbox import stack

TGT = stack.TGT_DRIVER
RBD = stack.RBD_DRIVER


@ddt.ddt
class ParseBackendsTestCase(testtools.TestCase):

    @ddt.unpack
    @ddt.data(
        ('tgt', [('tgt', TGT)]),
        ('tgt,rbd', [('tgt', TGT), ('rbd', RBD)]),
        (' a , ceph=rbd ,b=iscsi', [('a', TGT), ('ceph', RBD), ('b', TGT)]),
        ('x=my.pkg.Driver', [('x', 'my.pkg.Driver')]),
        ('rbd=tgt', [('rbd', TGT)]),
    )
    def test_parse(self, text, expected):
        self.assertEqual(expected, stack.parse_backends(text))

    @ddt.unpack
    @ddt.data((' , ', 'names no backend'), ('a,a=rbd', 'duplicate'),
              ('bad name', 'bad backend name'))
    def test_errors(self, text, message):
        err = self.assertRaises(stack.StackError, stack.parse_backends, text)
        self.assertIn(message, str(err))


class UsesCephTestCase(testtools.TestCase):

    def test_only_rbd_backends_need_ceph(self):
        self.assertFalse(ceph.uses_ceph({'backends': [['tgt', TGT]]}))
        # stack.json keeps the pairs as lists
        self.assertTrue(ceph.uses_ceph({'backends': [['tgt', TGT],
                                                     ['rbd', RBD]]}))


class GlanceTestCase(testtools.TestCase):

    def test_glance_starts_before_cinder_when_asked(self):
        order = services.process_order
        self.assertNotIn('glance-api', order({'volume_services': 1}))
        order = order({'glance': True, 'volume_services': 1})
        self.assertLess(order.index('glance-api'),
                        order.index('cinder-volume'))

    def test_glance_port_is_checked(self):
        with mock.patch.dict(os.environ, {'STACK_GLANCE_PORT': '70000'}):
            err = self.assertRaises(stack.StackError, stack.Settings,
                                    argparse.Namespace(state_dir=None))
        self.assertIn('glance_port', str(err))


class NovaTestCase(testtools.TestCase):

    def settings(self, **env):
        with mock.patch.dict(os.environ, env, clear=True):
            return stack.Settings(argparse.Namespace(state_dir=None))

    def test_nova_brings_keystone_glance_and_mariadb(self):
        s = self.settings(STACK_NOVA='1')
        self.assertEqual((True, True, True, 'mariadb'),
                         (s.nova, s.keystone, s.glance, s.db))

    def test_nova_on_sqlite_is_refused(self):
        err = self.assertRaises(stack.StackError, self.settings,
                                STACK_NOVA='1', STACK_DB='sqlite')
        self.assertIn('--nova needs --db mariadb', str(err))

    def test_horizon_brings_keystone(self):
        s = self.settings(STACK_HORIZON='1')
        self.assertEqual((True, True, 18080),
                         (s.horizon, s.keystone, s.horizon_port))
        self.assertRaises(stack.StackError, self.settings,
                          STACK_HORIZON='1', STACK_HORIZON_PORT='80')

    def test_nova_ports_are_checked(self):
        for var in ('STACK_NOVA_PORT', 'STACK_PLACEMENT_PORT',
                    'STACK_NEUTRON_PORT'):
            self.assertRaises(stack.StackError, self.settings,
                              STACK_NOVA='1', **{var: '70000'})

    def test_order_placement_before_cinder_nova_after(self):
        order = services.process_order
        self.assertNotIn('nova-api', order({'volume_services': 1}))
        order = order({'nova': True, 'keystone': True, 'glance': True,
                       'db': 'mariadb', 'volume_services': 1})
        self.assertLess(order.index('placement-api'),
                        order.index('cinder-volume'))
        self.assertLess(order.index('neutron-api'),
                        order.index('cinder-volume'))
        self.assertEqual(['cinder-api', 'nova-api', 'nova-conductor',
                          'nova-scheduler', 'nova-compute'], order[-5:])

    def test_a_second_compute_host(self):
        s = self.settings(STACK_NOVA='1', STACK_COMPUTES='2')
        self.assertEqual(2, s.computes)
        order = services.process_order({
            'nova': True, 'keystone': True, 'glance': True, 'db': 'mariadb',
            'volume_services': 1, 'virt': 'libvirt', 'computes': 2})
        self.assertEqual(['nova-compute', 'nova-compute-2'], order[-2:])
        self.assertLess(order.index('libvirtd-2'), order.index('nova-api'))
        for env in ({'STACK_COMPUTES': '2'},
                    {'STACK_NOVA': '1', 'STACK_COMPUTES': '3'}):
            self.assertRaises(stack.StackError, self.settings, **env)


class BackupTestCase(testtools.TestCase):

    def test_backup_starts_with_cinder_before_its_api(self):
        order = services.process_order
        self.assertNotIn('cinder-backup', order({'volume_services': 1}))
        order = order({'backup': True, 'volume_services': 1})
        self.assertEqual(['cinder-volume', 'cinder-backup', 'cinder-api'],
                         order[-3:])

    def test_backup_host_sees_only_the_cinder_keyring_in_etc_ceph(self):
        """The mount namespace is real: the command reads the copy."""
        state = self.useFixture(fixtures.TempDir()).path
        keyring = os.path.join(state, 'source.keyring')
        with open(keyring, 'w') as f:
            f.write('[client.cinder]\n\tkey = not-a-real-key\n')
        with mock.patch.dict(os.environ, {'STACK_DIR': state}, clear=True):
            st = stack.Stack(stack.Settings(argparse.Namespace(
                state_dir=None)))
        before = sorted(os.listdir(cinder.ETC_CEPH))
        with mock.patch.object(ceph.Ceph, 'settings', return_value={
                'CEPH_KEYRING': keyring, 'CEPH_USER': 'cinder'}):
            argv = st.service('cinder').backup_host_argv(
                st.ctx, ['ls', cinder.ETC_CEPH])
        listed = subprocess.run(argv, capture_output=True, text=True,
                                check=True).stdout.split()
        self.assertEqual(['ceph.client.cinder.keyring'], listed)
        self.assertEqual(before, sorted(os.listdir(cinder.ETC_CEPH)))
        copy = os.path.join(state, 'backup-etc-ceph',
                            'ceph.client.cinder.keyring')
        self.assertEqual(0o600, os.stat(copy).st_mode & 0o777)


class EtcdMembersTestCase(testtools.TestCase):

    def settings(self, **env):
        with mock.patch.dict(os.environ, env, clear=True):
            return stack.Settings(argparse.Namespace(state_dir=None))

    def test_one_member_by_default(self):
        s = self.settings(STACK_COORDINATION='etcd')
        self.assertEqual([], s.etcd_member_ports)
        order = services.process_order({'coordination': 'etcd',
                                        'etcd_member_ports': []})
        self.assertIn('etcd', order)
        self.assertNotIn('etcd-1', order)

    def test_three_members_behind_a_gateway(self):
        s = self.settings(STACK_COORDINATION='etcd', STACK_ETCD_MEMBERS='3',
                          STACK_ETCD_PORT='24000',
                          STACK_ETCD_MEMBER_PORTS='24100,24200,24300')
        self.assertEqual([24100, 24200, 24300], s.etcd_member_ports)
        info = {'coordination': 'etcd', 'etcd_port': 24000,
                'etcd_member_ports': s.etcd_member_ports}
        order = services.process_order(info)
        # The members first, the gateway Cinder talks to after them.
        self.assertEqual(['etcd-1', 'etcd-2', 'etcd-3', 'etcd'],
                         [n for n in order if n.startswith('etcd')])
        self.assertEqual({'etcd': [24000], 'etcd-1': [24100, 24101],
                          'etcd-2': [24200, 24201],
                          'etcd-3': [24300, 24301]},
                         services.registry()['etcd'].ports(info))
        # Without ports given, the ones above the etcd port.
        self.assertEqual([24002, 24004, 24006], self.settings(
            STACK_ETCD_MEMBERS='3', STACK_ETCD_PORT='24000').etcd_member_ports)

    def test_an_even_count_or_wrong_ports_are_refused(self):
        self.assertRaises(stack.StackError, self.settings,
                          STACK_ETCD_MEMBERS='2')
        self.assertRaises(stack.StackError, self.settings,
                          STACK_ETCD_MEMBERS='3',
                          STACK_ETCD_MEMBER_PORTS='24100,24200')
        self.assertRaises(stack.StackError, self.settings,
                          STACK_ETCD_MEMBERS='3',
                          STACK_ETCD_MEMBER_PORTS='24100,x,24300')
