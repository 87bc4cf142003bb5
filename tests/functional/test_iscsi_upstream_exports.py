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

"""Force-detach of exports that upstream's tgt helper made.

What an operator has the day ``volume_driver`` switches to ours: targets
made by Cinder's own ``cinder.volume.targets.tgt.TgtAdm`` (its target file,
``tgt-admin --update``, an ``initiator-address ALL`` rule and its CHAP
account), attachment rows written while upstream's driver served them, and
live initiators logged in with upstream's credentials.

Upstream's helper addresses tgtd's default control port and reads
``/etc/tgt/targets.conf``; here its ``tgt-admin``/``tgtadm`` commands are
pointed at this test's tgtd (``-C``) and at a tgt config that includes the
helper's ``volumes_dir`` (as devstack adds to targets.conf).  Nothing else
of upstream's code is changed.
"""

import os

from cinder import objects
import cinder.privsep.targets.tgt as upstream_privsep_tgt
from cinder.volume.targets import tgt as upstream_tgt
import fixtures
from oslo_concurrency import processutils

from cinder_forcedetach.conformance import initiator as qemu_io
from tests.functional import base
from tests.support import cutoff


class UpstreamExportTestCase(base.CinderTgtTestCase):

    def setUp(self):
        super(UpstreamExportTestCase, self).setUp()
        tgt_dir = self.useFixture(fixtures.TempDir()).path
        volumes_dir = os.path.join(tgt_dir, 'volumes')
        conf_file = os.path.join(tgt_dir, 'targets.conf')
        with open(conf_file, 'w') as f:
            f.write('include %s/*\n' % volumes_dir)
        base.CONF.set_override('volumes_dir', volumes_dir, base.BACKEND)
        execute = processutils.execute
        port = str(self.tgtd.control_port)

        def at_this_tgtd(*cmd, **kwargs):
            if cmd and cmd[0] == 'tgt-admin':
                cmd = (cmd[0], '-C', port, '-c', conf_file) + cmd[1:]
            elif cmd and cmd[0] == 'tgtadm':
                cmd = (cmd[0], '-C', port) + cmd[1:]
            return execute(*cmd, **kwargs)

        self.useFixture(fixtures.MonkeyPatch(
            'cinder.privsep.targets.tgt.processutils.execute', at_this_tgtd))
        self.assertIs(upstream_privsep_tgt.processutils.execute, at_this_tgtd)
        self.upstream = upstream_tgt.TgtAdm(
            configuration=self.driver.configuration)

    def upstream_attached(self, hosts, multiattach=False):
        """A volume exported and attached to *hosts* by upstream's code."""
        extra = {'volume_type': self.multiattach_type()} if multiattach else {}
        vol_id = self.create_volume(**extra)['id']
        volume = self.db_volume(vol_id)
        export = self.upstream.create_export(
            self.ctxt, volume, self.driver.local_path(volume))
        volume.update({'provider_location': export['location'],
                       'provider_auth': export['auth']})
        volume.save()
        atts, sessions = [], []
        for host in hosts:
            att = self.api.api_post('/attachments', {'attachment': {
                'volume_uuid': vol_id}})['attachment']
            connector = base.connector_for(host)
            info = self.upstream.initialize_connection(volume, connector)
            row = objects.VolumeAttachment.get_by_id(self.ctxt, att['id'])
            row.update({'connector': connector, 'attach_status': 'attached',
                        'connection_info': info['data']})
            row.save()
            atts.append(att['id'])
            sessions.append(self.login(info['data'], host))
            volume.refresh()
            volume.update({'status': 'in-use', 'attach_status': 'attached'})
            volume.save()
        state = self.target_state(vol_id)
        self.assertEqual((['ALL'], []), (state.address_acls, state.acls))
        self.assertEqual(len(hosts), len(state.sessions))
        return vol_id, atts, sessions, info['data']

    def accounts(self):
        out = self.tgtd.tgtadm('--op', 'show', '--mode', 'account').stdout
        return [line.strip() for line in out.splitlines()[1:]
                if line.strip()]

    def assert_cut(self, session, info, host):
        """Refused positively, nothing landed; a new login is refused."""
        self.assert_cut_off(session, 0xee)
        again = qemu_io.QemuIoInitiator(
            info['target_portal'], info['target_iqn'],
            base.initiator_name(host), info['auth_username'],
            info['auth_password'], lun=info['target_lun'])
        self.initiators.append(again)
        self.assertIsNone(again.opened, '%s logged in again' % host)
        cutoff.assert_refused(self, again.try_write(0xee, timeout=3),
                              'a new login of %s' % host)

    def test_force_detach_one_host_keeps_the_other(self):
        vol_id, (att1, att2), (s1, s2), info = self.upstream_attached(
            ['compute1', 'compute2'], multiattach=True)
        self.control_write(s1)
        self.force_detach_api(vol_id, base.connector_for('compute1'), att1,
                              service=True)
        vol = self.wait_volume(vol_id, ('in-use',))
        self.assertEqual([att2], [a['attachment_id']
                                  for a in vol['attachments']])
        state = self.target_state(vol_id)
        self.assertEqual(([], [base.initiator_name('compute2')]),
                         (state.address_acls, state.acls))
        self.assertTrue(s2.write(0x22, offset=4096))
        self.assert_cut(s1, info, 'compute1')

        self.control_write(s2)
        self.force_detach_api(vol_id, base.connector_for('compute2'), att2)
        self.wait_volume(vol_id, ('available',))
        self.assertIsNone(self.target_state(vol_id))
        self.assertEqual([], self.accounts())
        self.assert_cut(s2, info, 'compute2')

    def test_force_detach_single_host_removes_target_and_account(self):
        vol_id, (att,), (session,), info = self.upstream_attached(
            ['compute1'])
        self.assertEqual([info['auth_username']], self.accounts())
        self.force_detach_api(vol_id, base.connector_for('compute1'), att)
        self.wait_volume(vol_id, ('available',))
        self.assertIsNone(self.target_state(vol_id))
        self.assertEqual([], self.accounts())
        self.assert_cut(session, info, 'compute1')

    def test_attachment_delete_of_one_host(self):
        vol_id, (att1, att2), (s1, s2), info = self.upstream_attached(
            ['compute1', 'compute2'], multiattach=True)
        self.control_write(s1)
        self.api.api_delete('/attachments/%s' % att1,
                            headers=base.SERVICE)
        self.wait_volume(vol_id, ('in-use',))
        self.assertTrue(s2.write(0x33, offset=8192))
        self.assert_cut(s1, info, 'compute1')
