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

"""Our Cinder tgt target driver (the LVM driver's) on a real tgtd.

:class:`cinder_forcedetach.targets.cinder_tgt.TgtTarget` is what
:class:`cinder_forcedetach.drivers.lvm.LVMVolumeDriver` calls as its
``target_driver``.  It is driven here directly, against a real tgtd on
loopback, with live qemu-io/libiscsi initiators writing through it.

No LVM: these test kernels have no device-mapper, so no LV can be
activated.  The "LV" is a regular sparse file whose path the test gives the
target, where the LVM driver gives ``/dev/<volume_group>/<volume name>``;
tgtd's rdwr backing store serves either the same way.
"""

import os
from unittest import mock
import uuid

from cinder import context
from cinder import coordination
from cinder import exception as cinder_exception
from cinder import objects
import cinder.privsep
from cinder.tests.unit.brick import fake_lvm
from cinder.tests.unit import fake_volume
from cinder.volume import configuration
from cinder.volume import driver as cinder_driver
from cinder.volume.drivers import lvm as upstream_lvm
import fixtures
from oslo_config import cfg
from oslo_config import fixture as config_fixture
import testtools

from cinder_forcedetach.conformance import initiator as qemu_io
from cinder_forcedetach.drivers import lvm
from cinder_forcedetach.privileged import tgt as privileged_tgt
from cinder_forcedetach.targets import cinder_tgt
from tests.support import cutoff
from tests.support import tgtd as tgtd_daemon

CONF = cfg.CONF
GROUP = 'lvm_target_functional'
HOSTILE = (
    'iqn.2004-10.com.x:a,initiator-address=ALL',
    'iqn.2004-10.com.x:b\ninitiator-address=ALL',
    'iqn.2004-10.com.x:c initiator-address=ALL',
    'ALL',
    '--initiator-address=ALL',
)


def initiator_name(host):
    return 'iqn.2026-11.org.cinder-forcedetach.test:%s' % host


def connector_for(host):
    return {'host': host, 'initiator': initiator_name(host),
            'ip': '127.0.0.1', 'multipath': False}


class RecordingOps(object):
    """The privileged tgtadm operations, each call recorded."""

    def __init__(self, real):
        self.real = real
        self.calls = []

    def __getattr__(self, name):
        operation = getattr(self.real, name)

        def call(*args):
            self.calls.append(name)
            return operation(*args)
        return call


class LVMTargetTestCase(testtools.TestCase):

    def setUp(self):
        super(LVMTargetTestCase, self).setUp()
        objects.register_all()
        self.tgtd = self.useFixture(tgtd_daemon.TgtdFixture()).tgtd
        # We are root: tgtadm runs in this process, not through privsep.
        cinder.privsep.sys_admin_pctxt.set_client_mode(False)
        self.addCleanup(cinder.privsep.sys_admin_pctxt.set_client_mode, True)
        config = self.useFixture(config_fixture.Config(CONF))
        config.config(lock_path=self.useFixture(fixtures.TempDir()).path,
                      group='oslo_concurrency')
        self.configuration = configuration.Configuration(
            cinder_driver.volume_opts + cinder_tgt.tgt_opts,
            config_group=GROUP)
        for name, value in (
                ('target_ip_address', '127.0.0.1'),
                ('target_port', self.tgtd.port),
                ('target_helper', 'tgtadm'),
                ('forcedetach_tgt_control_port', self.tgtd.control_port)):
            CONF.set_override(name, value, GROUP)
        self.target = cinder_tgt.TgtTarget(configuration=self.configuration)
        self.ctxt = context.get_admin_context()
        self.lv_dir = self.useFixture(fixtures.TempDir()).path
        self.initiators = []
        self.addCleanup(self._close_initiators)

    def _close_initiators(self):
        for session in self.initiators:
            session.close()

    # -- helpers ----------------------------------------------------------

    def lvm_driver(self):
        """The LVM drop-in on this backend; no LVs here: its VG is faked."""
        return lvm.LVMVolumeDriver(
            configuration=self.configuration,
            vg_obj=fake_lvm.FakeBrickLVM('cinder-volumes', False, None,
                                         'default'))

    def make_volume(self):
        """A volume object and its stand-in "LV" (a 16 MiB sparse file)."""
        volume = fake_volume.fake_volume_obj(
            self.ctxt, id=str(uuid.uuid4()), size=1, multiattach=True)
        path = os.path.join(self.lv_dir, volume.name)
        with open(path, 'wb') as f:
            f.truncate(16 << 20)
        return volume, path

    def export(self, volume, path):
        """create_export, twice: the second returns the same export."""
        first = self.target.create_export(self.ctxt, volume, path)
        volume.provider_location = first['location']
        volume.provider_auth = first['auth']
        self.assertEqual(first, self.target.create_export(self.ctxt, volume,
                                                          path))
        self.assertTrue(first['auth'].startswith('CHAP '))
        return first

    def attach(self, volume, host):
        """An attachment row, initialize_connection twice, a live session."""
        attachment = objects.VolumeAttachment(
            context=self.ctxt, id=str(uuid.uuid4()), volume_id=volume.id,
            attach_status='attached', attached_host=host,
            connector=connector_for(host))
        volume.volume_attachment.objects.append(attachment)
        info = self.target.initialize_connection(volume, connector_for(host))
        self.assertEqual(info, self.target.initialize_connection(
            volume, connector_for(host)))
        session = self.login(info['data'], host)
        cutoff.control_write(self, session, 0x5a)
        return attachment, info['data']

    def login(self, data, host):
        session = qemu_io.QemuIoInitiator(
            data['target_portal'], data['target_iqn'], initiator_name(host),
            data.get('auth_username'), data.get('auth_password'),
            lun=data['target_lun'])
        self.initiators.append(session)
        return session

    def state(self, volume):
        return self.target.exports.target.find(
            self.target.exports.target_name(volume))

    def accounts(self):
        return self.tgtd.tgtadm('--op', 'show', '--mode', 'account').stdout

    # -- tests ---------------------------------------------------------------

    def test_revoke_one_host_keeps_the_other_then_remove_export(self):
        volume, path = self.make_volume()
        export = self.export(volume, path)
        username = export['auth'].split()[1]
        att1, data1 = self.attach(volume, 'compute1')
        att2, data2 = self.attach(volume, 'compute2')
        host1 = self.initiators[0]
        host2 = self.initiators[1]
        state = self.state(volume)
        self.assertEqual([initiator_name('compute1'),
                          initiator_name('compute2')], state.acls)
        self.assertEqual([], state.address_acls)
        self.assertEqual(2, len(state.sessions))

        # Host 1 leaves: twice, the second finds nothing left to revoke.
        control = cutoff.control_write(self, host1, 0x5a, backing=path)
        for _ in range(2):
            self.assertTrue(self.target.terminate_connection(
                volume, connector_for('compute1')))
            state = self.state(volume)
            self.assertEqual([initiator_name('compute2')], state.acls)
            self.assertEqual([initiator_name('compute2')],
                             [s.initiator for s in state.sessions])
        cutoff.assert_cut_off(self, host1, path, 0xee, control=control)
        self.assertTrue(host2.write(0x33, offset=8192))
        # Host 1 logging in again, CHAP account and all, is refused.
        again = self.login(data1, 'compute1')
        cutoff.assert_refused(self, again.try_write(0xee, timeout=3),
                              'a new login of host 1')
        att1.attach_status = 'detached'

        # Cinder's remove_export while host 2 is attached keeps the export.
        self.target.remove_export(self.ctxt, volume)
        self.assertIsNotNone(self.state(volume))
        control = cutoff.control_write(self, host2, 0x44, offset=4096,
                                       backing=path)

        # Host 2 leaves too: target, LUN, sessions and CHAP account go.
        att2.attach_status = 'detached'
        for _ in range(2):
            self.target.remove_export(self.ctxt, volume)
            self.assertIsNone(self.state(volume))
            self.assertNotIn(username, self.accounts())
        cutoff.assert_cut_off(self, host2, path, 0xee, control=control)
        with open(path, 'rb') as f:
            self.assertNotIn(b'\xee' * 512, f.read(1 << 20))

    def test_extend_target_keeps_chap_and_acl(self):
        """extend_target (upstream LVM's extend_volume) remakes the target.

        Run on the stand-in LV's path: the LV's own, ``/dev/<vg>/<name>``,
        cannot exist here (checked separately).
        """
        CONF.set_override('backend_url', 'file://' + self.lv_dir,
                          'coordination')
        coordination.COORDINATOR.start()
        self.addCleanup(coordination.COORDINATOR.stop)
        volume, path = self.make_volume()
        self.export(volume, path)
        _att, data = self.attach(volume, 'compute1')
        before = self.state(volume)
        with open(path, 'r+b') as f:
            f.truncate(32 << 20)
        self.target.exports.remake(volume, path)
        after = self.state(volume)
        self.assertEqual((before.acls, before.accounts),
                         (after.acls, after.accounts))
        self.assertIn('32 MiB', self.login(data, 'compute1')._command(
            'length', 10))

        self.configuration.append_config_values(upstream_lvm.volume_opts)
        with mock.patch.object(self.target.exports, 'remake') as remake:
            self.target.extend_target(volume)
        remake.assert_called_once_with(volume, '/dev/cinder-volumes/%s' %
                                       volume.name)

    def test_revoke_every_host(self):
        volume, path = self.make_volume()
        self.export(volume, path)
        self.attach(volume, 'compute1')
        self.attach(volume, 'compute2')
        controls = [cutoff.control_write(self, session, 0x5a)
                    for session in self.initiators]
        for _ in range(2):
            self.assertFalse(self.target.revoke(volume, None))
            state = self.state(volume)
            self.assertEqual(([], [], []), (state.acls, state.address_acls,
                                            state.sessions))
        for session, control in zip(self.initiators, controls):
            cutoff.assert_cut_off(self, session, path, 0xee, control=control)

    def test_hostile_initiator_refused_before_tgtadm_runs(self):
        volume, path = self.make_volume()
        self.export(volume, path)
        self.attach(volume, 'compute1')
        exports = self.target.exports.target
        recording = RecordingOps(exports._ops)
        exports._ops = recording
        driver = self.lvm_driver()
        self.assertIsInstance(driver.target_driver, cinder_tgt.TgtTarget)
        driver.target_driver = self.target
        for initiator in HOSTILE:
            connector = dict(connector_for('compute2'), initiator=initiator)
            for call in (
                    lambda: self.target.validate_connector(connector),
                    lambda: self.target.initialize_connection(volume,
                                                              connector),
                    lambda: self.target.terminate_connection(volume,
                                                             connector),
                    lambda: driver.validate_connector(connector)):
                self.assertRaises(cinder_exception.InvalidConnectorException,
                                  call)
        self.assertEqual([], recording.calls)
        exports._ops = privileged_tgt
        state = self.state(volume)
        self.assertEqual([initiator_name('compute1')], state.acls)
        self.assertEqual([], state.address_acls)
        self.assertTrue(self.initiators[0].write(0x11, offset=4096))

    def test_lvm_driver_hooks_use_the_target(self):
        """The LVM driver's force-detach hooks on the same real target."""
        driver = self.lvm_driver()
        self.assertIsInstance(driver.target_driver, cinder_tgt.TgtTarget)
        self.target = driver.target_driver
        volume, path = self.make_volume()
        self.export(volume, path)
        att1, _data = self.attach(volume, 'compute1')
        self.attach(volume, 'compute2')
        control = cutoff.control_write(self, self.initiators[0], 0x5a)
        for _ in range(2):
            self.assertTrue(driver.revoke_host_access(
                volume, connector_for('compute1')))
        self.assertEqual([initiator_name('compute2')],
                         self.state(volume).acls)
        cutoff.assert_cut_off(self, self.initiators[0], path, 0xee,
                              control=control)
        self.assertTrue(self.initiators[1].write(0x22, offset=4096))
        self.assertEqual('iscsi', driver.local_connection_info(
            volume, connector_for('compute2'))['driver_volume_type'])
        for attachment in volume.volume_attachment:
            attachment.attach_status = 'detached'
        for _ in range(2):
            driver.remove_export_unlocked(self.ctxt, volume)
            self.assertIsNone(self.state(volume))

    def test_other_target_helper_stays_upstreams(self):
        """lioadm: upstream's target; revocation is its terminate_connection.

        No LIO here: its terminate_connection is recorded, not run.
        """
        CONF.set_override('target_helper', 'lioadm', GROUP)
        # LioAdm checks for cinder-rtstool when it is built.
        with mock.patch('cinder.volume.targets.lio.LioAdm._verify_rtstool'):
            driver = self.lvm_driver()
        self.assertFalse(driver.our_target)
        self.assertEqual('cinder.volume.targets.lio',
                         type(driver.target_driver).__module__)
        volume, _path = self.make_volume()
        for host in ('compute1', 'compute2'):
            volume.volume_attachment.objects.append(objects.VolumeAttachment(
                context=self.ctxt, id=str(uuid.uuid4()), volume_id=volume.id,
                attach_status='attached', attached_host=host,
                connector=connector_for(host)))
        with mock.patch.object(driver.target_driver,
                               'terminate_connection') as terminate, \
                mock.patch.object(lvm.LOG, 'warning') as warning:
            self.assertTrue(driver.revoke_host_access(
                volume, connector_for('compute1')))
            terminate.assert_called_once_with(volume,
                                              connector_for('compute1'))
            terminate.reset_mock()
            self.assertFalse(driver.revoke_host_access(volume, None))
            self.assertEqual([mock.call(volume, connector_for('compute1')),
                              mock.call(volume, connector_for('compute2'))],
                             terminate.call_args_list)
        self.assertEqual(2, warning.call_count)
        self.assertIsNone(driver.local_connection_info(
            volume, connector_for('compute1')))
        for initiator in HOSTILE:
            self.assertRaises(
                cinder_exception.InvalidConnectorException,
                driver.validate_connector,
                dict(connector_for('compute2'), initiator=initiator))
