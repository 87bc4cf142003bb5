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

"""The audit's Nova side against real Nova, on the ``up --nova`` box.

Mixed into :class:`tests.functional.test_stack_nova.NovaBoxTestCase` so
that they share its box.  The audit runs as an operator runs it on the
volume host, ``cinder-forcedetach audit`` on the box's cinder.conf, and
reads Nova through Cinder's own ``[nova]`` client with the box's service
credentials: Nova's server listing, every project.  Each case is made
through Nova's and Cinder's APIs, as it happens in a cloud.  The tests
share the box with others, so findings are looked at for their own
volumes only.
"""

import uuid

from devbox.services import nova as nova_service
from tests.support import cutoff

#: The compute host's initiator (tools/nova_compute.py, which imports Nova:
#: not here, where eventlet is already imported).
BOX_IQN = nova_service.initiator_name(nova_service.COMPUTE_HOST)


class NovaAuditCases(object):
    """Audit cases that involve Nova, on real Nova (a mixin)."""

    def test_audit_force_detaches_an_attachment_nova_has_no_mapping_of(self):
        """attachment_without_bdm: fixed by our flow; the host is cut.

        The attachment is made for the server through Cinder's API with
        the compute host's connector (as a Nova that crashed between
        Cinder's attach and its own mapping leaves it): Nova's listing of
        the server does not name the volume.
        """
        boot_id = self.new_volume('forgot-boot', self.box_image())
        vol_id = self.new_volume('forgot-data')
        server_id = self.boot('forgot', boot_id)
        boot_host = self.compute_session(boot_id)
        connector = {'initiator': BOX_IQN, 'host': nova_service.COMPUTE_HOST,
                     'ip': '127.0.0.1', 'multipath': False,
                     'platform': 'x86_64', 'os_type': 'linux'}
        att = self.api('POST', '/attachments', {'attachment': {
            'volume_uuid': vol_id, 'instance_uuid': server_id,
            'connector': connector}})['attachment']
        self.api('POST', '/attachments/%s/action' % att['id'],
                 {'os-complete': None})
        host = self.compute_session(vol_id)
        control = cutoff.control_write(self, host, 0x3c, offset=8192,
                                       backing=self.backing_path(vol_id))

        code, found = self.audit()
        self.assertEqual(3, code, found)
        self.assertEqual([('attachment_without_bdm', att['id'], server_id,
                           nova_service.COMPUTE_HOST)],
                         [(r['case'], r['attachment'], r['instance'],
                           r['host']) for r in found[vol_id]])
        self.assertNotIn(boot_id, found)

        code, found = self.audit('--fix')
        self.assertEqual(4, code, found)
        self.assertEqual(['repaired'], [r['result'] for r in found[vol_id]])
        self.assertEqual((False, []), self.target(vol_id))
        cutoff.assert_cut_off(self, host, self.backing_path(vol_id), 0x3d,
                              control=control)
        self.assertEqual('available', self.volume(vol_id)['status'])
        self.assertEqual([], self.attachments(vol_id))
        # The server's own volume, same host, same initiator: untouched.
        cutoff.control_write(self, boot_host, 0x3e, offset=1 << 20,
                             backing=self.backing_path(boot_id))
        self.assertEqual({boot_id}, self.nova_volumes(server_id))
        self.assertNotIn(vol_id, self.audit()[1])

    def test_audit_reports_a_mapping_cinder_forgot_and_leaves_it(self):
        """bdm_without_attachment is Nova's to repair; reserved_orphan ours.

        The service's force-detach (as printed by ``up``) removes Cinder's
        attachment while Nova keeps the server's mapping.
        """
        boot_id = self.new_volume('cforgot-boot', self.box_image())
        vol_id = self.new_volume('cforgot-data')
        reserved_id = self.new_volume('cforgot-reserved')
        server_id = self.boot('cforgot', boot_id)
        # And a reservation of an instance Nova does not have: ours.
        reserved = self.api('POST', '/attachments', {'attachment': {
            'volume_uuid': reserved_id,
            'instance_uuid': str(uuid.uuid4())}})['attachment']
        self.attach(server_id, vol_id)
        res = self.shell(self.box.service('cinder').manage_command(
            self.box.ctx, '--service-token volume force-detach %s' % vol_id,
            'service'))
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertEqual({boot_id, vol_id}, self.nova_volumes(server_id))

        code, found = self.audit('--fix')
        self.assertEqual(3, code, found)
        [row] = found[vol_id]
        self.assertEqual(('bdm_without_attachment', server_id),
                         (row['case'], row['instance']))
        self.assertTrue(row['result'].startswith('refused: Nova'), row)
        self.assertEqual({boot_id, vol_id}, self.nova_volumes(server_id))
        self.assertEqual([('reserved_orphan', reserved['id'], 'repaired')],
                         [(r['case'], r['attachment'], r['result'])
                          for r in found[reserved_id]])
        self.assertEqual(('available', []), (
            self.volume(reserved_id)['status'],
            self.attachments(reserved_id)))

        self.nova('POST', '/servers/%s/action' % server_id,
                  {'reboot': {'type': 'SOFT'}})
        self.settled(server_id)
        self.wait(lambda: self.nova_volumes(server_id) == {boot_id},
                  'Nova to drop the stale mapping')
        self.assertNotIn(vol_id, self.audit()[1])

    def test_audit_fix_refused_while_the_instance_is_active_on_it(self):
        """A stuck volume an active server maps: reported, never touched.

        The operator's ``reset-state --state detaching`` of a volume Nova
        uses; ``--fix`` refuses, the host keeps writing.  Nova's own delete
        of the server then detaches it through our driver.
        """
        boot_id = self.new_volume('active-boot', self.box_image())
        vol_id = self.new_volume('active-data')
        server_id = self.boot('active', boot_id)
        self.attach(server_id, vol_id)
        [att] = self.attachments(vol_id)
        host = self.compute_session(vol_id)
        self.api('POST', '/volumes/%s/action' % vol_id,
                 {'os-reset_status': {'status': 'detaching'}})

        code, found = self.audit('--fix')
        self.assertEqual(3, code, found)
        self.assertEqual(
            [('stuck_transition',
              'refused: instance %s is active on a live block device mapping '
              'of attachment %s' % (server_id, att['id']))],
            [(r['case'], r['result']) for r in found[vol_id]])
        # A refused fix cut nothing: the host's write lands.
        cutoff.control_write(self, host, 0x71, offset=4096,
                             backing=self.backing_path(vol_id))
        self.assertEqual('detaching', self.volume(vol_id)['status'])
        self.assertEqual((True, [BOX_IQN]), self.target(vol_id))

        self.delete_server(server_id)
        self.wait(lambda: self.volume(vol_id)['status'] == 'available',
                  'Nova to detach the deleted server\'s volume')
        self.assertEqual((False, []), self.target(vol_id))
        self.assertNotIn(vol_id, self.audit()[1])

    def test_audit_fences_the_volumes_of_a_forced_down_compute_host(self):
        """forced_down_host: the host cut before its servers are evacuated.

        The operator forces the compute service down (``openstack compute
        service set --down box-compute nova-compute``, Nova's precondition
        for evacuate) while its active server has a data volume the host
        writes (a live session with the compute's initiator).  The audit
        finds both of the server's attachments; ``--fix`` cuts the host off
        and ends them although the instance is active (forced down is the
        operator's word that the host is gone): the volumes are available,
        the targets gone, nothing of the host lands.
        """
        boot_id = self.new_volume('fdown-boot', self.box_image())
        vol_id = self.new_volume('fdown-data')
        server_id = self.boot('fdown', boot_id)
        self.attach(server_id, vol_id)
        [att] = self.attachments(vol_id)
        host = self.compute_session(vol_id)
        control = cutoff.control_write(self, host, 0x5a, offset=8192,
                                       backing=self.backing_path(vol_id))
        [service] = [s for s in self.nova(
            'GET', '/os-services?binary=nova-compute')['services']
            if s['host'] == nova_service.COMPUTE_HOST]
        self.assertNotIn(vol_id, self.audit()[1])
        self.nova('PUT', '/os-services/%s' % service['id'],
                  {'forced_down': True})
        self.addCleanup(self.nova, 'PUT', '/os-services/%s' % service['id'],
                        {'forced_down': False})

        _code, found = self.audit()
        for volume_id in (vol_id, boot_id):
            self.assertEqual(
                [('forced_down_host', server_id, nova_service.COMPUTE_HOST)],
                [(r['case'], r['instance'], r['host'])
                 for r in found[volume_id]])
        self.assertEqual(att['id'], found[vol_id][0]['attachment'])

        _code, found = self.audit('--fix', '--case', 'forced_down_host')
        for volume_id in (vol_id, boot_id):
            self.assertEqual(['repaired'],
                             [r['result'] for r in found[volume_id]])
            self.assertEqual('available', self.volume(volume_id)['status'])
            self.assertEqual([], self.attachments(volume_id))
            self.assertEqual((False, []), self.target(volume_id))
        cutoff.assert_cut_off(self, host, self.backing_path(vol_id), 0x5b,
                              control=control)
        # What is left is Nova's mapping: the evacuation rebuilds it.
        self.assertEqual(['bdm_without_attachment'],
                         [r['case'] for r in self.audit()[1][vol_id]])
