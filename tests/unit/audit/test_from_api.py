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


"""The audit from Cinder's and Nova's API answers (Horizon, openstack)."""

import datetime

import testtools

from cinder_forcedetach.audit import cases
from cinder_forcedetach.audit import from_api

NOW = datetime.datetime(2026, 11, 27, 12, 0, 0)
OLD = '2026-11-27T10:00:00.000000'


def volume(vid, status='in-use', attachments=(), updated_at=OLD):
    return {'id': vid, 'name': 'vol-' + vid, 'status': status,
            'os-vol-host-attr:host': 'node1@tgt#tgt',
            'updated_at': updated_at,
            'attachments': [{'attachment_id': aid, 'host_name': host,
                             'server_id': None} for aid, host in attachments]}


def attachment(aid, vid, status='attached', instance=None):
    return {'id': aid, 'volume_id': vid, 'status': status,
            'instance': instance}


def server(sid, vids, state='active'):
    return {'id': sid, 'OS-EXT-STS:vm_state': state,
            cases.SERVER_VOLUMES: [{'id': v} for v in vids]}


class FindingsTestCase(testtools.TestCase):

    def found(self, volumes, attachments, servers=None, grace=60):
        snap = from_api.snapshot(volumes, attachments, servers, now=NOW)
        found, in_flux = from_api.by_volume(snap, grace)
        return {vid: [f.case for f in fs] for vid, fs in found.items()}, \
            in_flux

    def test_the_cinder_and_nova_cases(self):
        found, in_flux = self.found(
            [volume('stuck', 'detaching'), volume('lost', 'in-use'),
             volume('orphan', 'reserved'),
             volume('forgot', 'in-use', [('a4', 'compute1')]),
             volume('fine', 'in-use', [('a5', 'compute1')])],
            [attachment('a3', 'orphan', 'reserved', instance='gone'),
             attachment('a4', 'forgot', instance='i1'),
             attachment('a5', 'fine', instance='i2'),
             attachment('a6', 'lost', 'detached')],
            [server('i1', []), server('i2', ['fine'])])
        self.assertEqual({'stuck': ['stuck_transition'],
                          'lost': ['in_use_without_attachment'],
                          'orphan': ['reserved_orphan'],
                          'forgot': ['attachment_without_bdm']}, found)
        self.assertEqual(set(), in_flux)

    def test_without_nova_what_an_instance_holds_is_refused(self):
        snap = from_api.snapshot(
            [volume('stuck', 'attaching')],
            [attachment('a1', 'stuck', 'attaching', instance='i1')],
            None, now=NOW)
        [finding] = from_api.by_volume(snap)[0]['stuck']
        self.assertEqual('stuck_transition', finding.case)
        self.assertIn('Nova was not consulted', finding.refused)

    def test_a_volume_changed_within_the_grace_period_is_not_judged(self):
        found, in_flux = self.found(
            [volume('new', 'detaching', updated_at='2026-11-27T11:59:30Z')],
            [])
        self.assertEqual({}, found)
        self.assertEqual({'new'}, in_flux)

    def test_the_host_of_an_attachment_is_the_volumes_host_name(self):
        snap = from_api.snapshot(
            [volume('v1', attachments=[('a1', 'compute7')])],
            [attachment('a1', 'v1')], [], now=NOW)
        [att] = snap.attachments['v1']
        self.assertEqual(('compute7', None), (att.attached_host,
                                              att.connector))
        self.assertEqual('node1@tgt', snap.volumes['v1'].backend)

    def test_listed(self):
        snap = from_api.snapshot(
            [volume('idle', 'available'), volume('used', 'in-use'),
             volume('held', 'available')],
            [attachment('a1', 'held', 'attaching')], [], now=NOW)
        listed = {vid for vid, vol in snap.volumes.items()
                  if from_api.listed(vol, snap.attachments.get(vid), [])}
        self.assertEqual({'used', 'held'}, listed)

    def test_the_export_is_named_without_credentials(self):
        text = from_api.export_of({
            'driver_volume_type': 'iscsi', 'target_iqn': 'iqn.x:volume-1',
            'target_portal': '127.0.0.1:3260', 'target_lun': 1,
            'auth_method': 'CHAP', 'auth_username': 'user',
            'auth_password': 'hunter22'})
        self.assertEqual('iscsi target_iqn=iqn.x:volume-1 '
                         'target_portal=127.0.0.1:3260 target_lun=1', text)
        self.assertEqual('rbd name=volumes/volume-1', from_api.export_of({
            'driver_volume_type': 'rbd', 'data': {
                'name': 'volumes/volume-1', 'keyring': 'AQ...',
                'secret_uuid': 's'}}))
        self.assertEqual('', from_api.export_of(None))

    def test_api_timestamps(self):
        self.assertEqual(NOW, from_api.parse_time('2026-11-27T12:00:00'))
        self.assertEqual(NOW, from_api.parse_time('2026-11-27T12:00:00Z'))
        self.assertEqual(NOW, from_api.parse_time(
            '2026-11-27T12:00:00.000000+00:00'))
        self.assertIsNone(from_api.parse_time(None))
        self.assertIsNone(from_api.parse_time('yesterday'))
