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

"""A grant of access racing a force-detach, on a real tgtd.

Cinder's attachment update finds the attachment in its API, then the
volume service grants the host access.  A force-detach of every host that
runs in between ends that attachment and marks the volume ``available``:
the grant that follows must be refused, or the host gets an ACL (and a
login) on a volume Cinder says is detached -- the access leak an outside
concurrency probe found.  The race is made deterministic by holding the
volume service at the start of its grant until the force-detach is done.
"""

import eventlet
import fixtures

from cinder.tests.functional.api import client

from cinder_forcedetach import locks
from tests.functional import base


class GrantRaceTestCase(base.CinderTgtTestCase):

    def hold_driver_call(self, name, after=False):
        """Hold the volume service's next call of the driver's *name*.

        Before the call runs, or (*after*) once it returned.  Returns
        (entered, go).
        """
        entered, go = eventlet.event.Event(), eventlet.event.Event()
        real = getattr(self.driver, name)

        def held(*args):
            result = real(*args) if after else None
            if not entered.ready():
                entered.send()
                go.wait()
            return result if after else real(*args)

        setattr(self.driver, name, held)
        self.addCleanup(setattr, self.driver, name, real)
        return entered, go

    def hold_grants(self):
        """Hold the next grant before it starts; (entered, go).

        _connection_create validates the connector first, before the
        export and the grant.
        """
        return self.hold_driver_call('validate_connector')

    def hold_after_grants(self):
        """Hold the next grant once it returns to Cinder, unrecorded.

        Cinder's ``_connection_create`` records the host's connector on
        the attachment after the driver's grant returns; this holds the
        volume service in between.  Returns (entered, go).
        """
        return self.hold_driver_call('initialize_connection', after=True)

    def update_attachment(self, att_id, host):
        try:
            self.api.api_put('/attachments/%s' % att_id, {'attachment': {
                'connector': self.connector(host)}})
        except client.OpenStackApiException as err:
            return err.response.status_code
        return 200

    def update_held_then_force_detach(self, host):
        """*host*'s attachment update held at its grant, every host ended.

        Returns (volume id, the update's green thread, the event that
        lets the grant go on).
        """
        vol_id = self.create_volume()['id']
        att = self.api.api_post('/attachments', {'attachment': {
            'volume_uuid': vol_id}})['attachment']
        entered, go = self.hold_grants()
        update = eventlet.spawn(self.update_attachment, att['id'], host)
        entered.wait()
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        return vol_id, update, go

    def test_grant_after_a_force_detach_of_every_host_is_refused(self):
        vol_id, update, go = self.update_held_then_force_detach('compute4')
        self.assertEqual('available', self.api.get_volume(vol_id)['status'])
        go.send()
        self.assertNotEqual(200, update.wait())

        volume = self.api.get_volume(vol_id)
        self.assertEqual(('available', []),
                         (volume['status'], volume['attachments']))
        state = self.target_state(vol_id)
        self.assertNotIn(base.initiator_name('compute4'),
                         state.acls if state else [])
        if state is not None:
            self.assertEqual([], state.address_acls)

    def test_grant_after_its_attachment_ended_and_another_host_came(self):
        """The volume is in-use again, by another host: still refused.

        A soak's history on the cluster box: the force-detach ended the
        reserved attachment, another host attached, then the held grant
        ran.  The volume's status no longer says the attachment ended;
        the attachment itself does.  Before the check, the host got an
        ACL that no attachment explained (Cinder's update then failed on
        the ended row).
        """
        vol_id, update, go = self.update_held_then_force_detach('compute4')
        self.attach(vol_id, 'compute2')
        self.assertEqual('in-use', self.api.get_volume(vol_id)['status'])
        go.send()
        self.assertNotEqual(200, update.wait())

        self.assertEqual([base.initiator_name('compute2')],
                         sorted(self.target_state(vol_id).acls))
        self.assertEqual(['compute2'], [
            a['connector']['host'] for a in
            self.db_volume(vol_id).volume_attachment])

    def test_grant_of_a_host_whose_attachment_stays_goes_through(self):
        """The check refuses only what a force-detach ended."""
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att1, info1 = self.attach(vol_id, 'compute1')
        att2 = self.api.api_post('/attachments', {'attachment': {
            'volume_uuid': vol_id}})['attachment']
        entered, go = self.hold_grants()
        update = eventlet.spawn(self.update_attachment, att2['id'],
                                'compute2')
        entered.wait()
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id),
                                 connector=base.connector_for('compute1'),
                                 attachment_id=att1['id'])
        go.send()
        self.assertEqual(200, update.wait())
        self.assertIn(base.initiator_name('compute2'),
                      self.target_state(vol_id).acls)
        self.assertNotIn(base.initiator_name('compute1'),
                         self.target_state(vol_id).acls)

    def test_two_hosts_granted_at_once_on_a_multiattach_volume_keep_it(self):
        """A grant's fence does not cut a host granted a moment before.

        A clean-clone run's 50-call storm: compute2's grant returned and,
        before Cinder recorded compute2's connector on its attachment,
        compute1's grant fence read the attachments under the lock and
        found compute2's ACL explained by nothing: it was cut, and the
        audit found compute2 ``attached_not_exported``.  The grant now
        records the connector itself before it lets the lock go.
        """
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att3, _info = self.attach(vol_id, 'compute3')
        att2 = self.reserve(vol_id)
        entered, go = self.hold_after_grants()
        update = eventlet.spawn(self.update_attachment, att2['id'],
                                'compute2')
        entered.wait()
        # Another host's os-complete (again) puts the reserved volume back
        # in-use: how the storm let a second host attach meanwhile.
        self.api.api_post('/attachments/%s/action' % att3['id'],
                          {'os-complete': {}}, check_response_status=[204])
        self.assertEqual('in-use', self.api.get_volume(vol_id)['status'])
        self.attach(vol_id, 'compute1')
        go.send()
        self.assertEqual(200, update.wait())

        self.assertEqual(sorted(base.initiator_name(h)
                                for h in ('compute1', 'compute2',
                                          'compute3')),
                         sorted(self.target_state(vol_id).acls))
        self.assertEqual(['compute1', 'compute2', 'compute3'], sorted(
            a.connector['host'] for a in
            self.db_volume(vol_id).volume_attachment))

    def test_export_is_made_under_the_volume_lock(self):
        """An export is several tgtd calls: no removal between them.

        tgtd makes an export as a CHAP account, a target, a LUN and the
        account's binding; another volume service's ``remove_export`` in
        between deleted the account being bound (a clean-clone run: the
        attach got HTTP 500, ``bind_account failed: can't find the
        account``).  While Cinder's ``create_export`` makes the export,
        the volume's lock is held: another holder cannot take it.
        """
        vol_id = self.create_volume()['id']
        taken_by_another = []
        real_create = self.driver.exports.create

        def create(volume, path):
            other = locks.volume_lock(volume.id)
            if other.acquire(blocking=False):
                other.release()
                taken_by_another.append(True)
            else:
                taken_by_another.append(False)
            return real_create(volume, path)

        self.useFixture(fixtures.MockPatchObject(
            self.driver.exports, 'create', side_effect=create))
        self.attach(vol_id, 'compute1')
        self.assertEqual([False], taken_by_another)
