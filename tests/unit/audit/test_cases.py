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

"""The classification: one snapshot in, findings out (pure: no source)."""

import datetime

import ddt
import testtools

from cinder_forcedetach.audit import cases
from cinder_forcedetach.audit import records
from cinder_forcedetach import host_access

NOW = datetime.datetime(2026, 11, 23, 12, 0, 0)
OLD = NOW - datetime.timedelta(hours=2)
BACKEND = 'node1@tgt'
IQN1 = 'iqn.2026-11.org.example:compute1'
IQN2 = 'iqn.2026-11.org.example:compute2'


def volume(vid='v1', status='in-use', attach_status='attached', deleted=False,
           updated_at=OLD, backend=BACKEND, in_teardown=None):
    return records.Volume(vid, 'volume-%s' % vid, status, attach_status,
                          backend, updated_at, deleted, in_teardown)


def attachment(aid, vid='v1', host='compute1', status='attached',
               instance='i1', updated_at=OLD, iqn=IQN1):
    connector = None if host is None else {'host': host, 'initiator': iqn,
                                           'ip': '10.0.0.%s' % host[-1]}
    return records.Attachment(aid, vid, status, instance, connector, host,
                              updated_at)


def acl(iqn=IQN1, kind='acl'):
    return host_access.Holder(kind, frozenset({'iqn:' + iqn}), iqn,
                              {'initiator': iqn})


def bdm(instance='i1', vid='v1', att=None, state='active'):
    return records.Bdm(instance, vid, att, state, 'compute1')


def snapshot(volumes, attachments=(), holders=None, nova=None, grants=True,
             fences=()):
    backend = cases.Backend(BACKEND, holders=holders or {}, grants=grants,
                            fences=list(fences))
    atts = {}
    for att in attachments:
        atts.setdefault(att.volume_id, []).append(att)
    return cases.Snapshot({v.id: v for v in volumes}, atts,
                          {BACKEND: backend}, nova, now=NOW)


def classify(snap, grace=60):
    findings, skipped = cases.classify(snap, grace=grace)
    return findings, skipped


@ddt.ddt
class ClassifyTestCase(testtools.TestCase):

    def cases_of(self, snap, grace=60):
        return sorted(f.case for f in classify(snap, grace)[0])

    def test_consistent_volume_finds_nothing(self):
        snap = snapshot([volume()], [attachment('a1')],
                        {'v1': [acl(), acl(kind='session')]},
                        cases.Nova([bdm(att='a1')], {'i1': 'active'}))
        self.assertEqual([], self.cases_of(snap))

    def test_available_volume_with_acl_is_a_leaked_export(self):
        snap = snapshot([volume(status='available',
                                attach_status='detached')], [],
                        {'v1': [acl(), acl(kind='session')]})
        (finding,) = classify(snap)[0]
        self.assertEqual(('leaked_export', cases.DETACH_ALL, None),
                         (finding.case, finding.action, finding.refused))
        self.assertEqual('acl %s, session %s' % (IQN1, IQN1),
                         finding.evidence)

    def test_host_not_attached_is_revoked_alone(self):
        snap = snapshot([volume()], [attachment('a1')],
                        {'v1': [acl(), acl(IQN2)]})
        (finding,) = classify(snap)[0]
        self.assertEqual(('leaked_export', cases.REVOKE,
                          {'initiator': IQN2}),
                         (finding.case, finding.action, finding.connector))

    def test_address_rule_admitting_everyone_is_refused_when_attached(self):
        everyone = host_access.Holder('address-acl',
                                      frozenset({host_access.ANY_HOST}), 'ALL',
                                      None)
        snap = snapshot([volume()], [attachment('a1')],
                        {'v1': [acl(), everyone]})
        findings = classify(snap)[0]
        # ALL reaches the attached host too: nothing is leaked by host.
        self.assertEqual([], findings)
        snap = snapshot([volume(status='available',
                                attach_status='detached')], [],
                        {'v1': [everyone]})
        (finding,) = classify(snap)[0]
        self.assertEqual(cases.DETACH_ALL, finding.action)

    def test_bare_export_of_an_attached_volume_is_no_leak(self):
        bare = host_access.Holder('export', frozenset(), 'iqn.t:volume-v1',
                                  None)
        snap = snapshot([volume()], [attachment('a1')], {'v1': [bare]},
                        cases.Nova([bdm(att='a1')], {'i1': 'active'}))
        self.assertEqual(['attached_not_exported'], self.cases_of(snap))
        snap = snapshot([volume(status='available',
                                attach_status='detached')], [],
                        {'v1': [bare]})
        (finding,) = classify(snap)[0]
        self.assertEqual(('leaked_export', cases.DETACH_ALL, None),
                         (finding.case, finding.action, finding.refused))

    def test_deleted_volume_still_exported_is_torn_down(self):
        snap = snapshot([volume(deleted=True, status='deleted')], [],
                        {'v1': [acl()]})
        (finding,) = classify(snap)[0]
        self.assertEqual(('leaked_export', cases.TEARDOWN),
                         (finding.case, finding.action))

    def test_attachment_of_a_forced_down_host_is_fenced_though_active(self):
        """Forced down is the operator's word that the host is gone.

        The evacuated server is active in Nova and its mapping stays: the
        other cases would refuse; this one is for exactly that server.
        The other host's attachment of the shared volume is no finding.
        """
        nova = cases.Nova([bdm(att='a1'), bdm('i2', att='a2')],
                          {'i1': 'active', 'i2': 'active'},
                          forced_down=frozenset({'compute1'}))
        snap = snapshot([volume()], [
            attachment('a1'),
            attachment('a2', host='compute2', instance='i2', iqn=IQN2)],
            {'v1': [acl(), acl(kind='session'), acl(IQN2)]}, nova)
        (finding,) = classify(snap)[0]
        self.assertEqual(
            ('forced_down_host', 'a1', 'compute1', cases.REVOKE, None),
            (finding.case, finding.attachment_id, finding.host,
             finding.action, finding.refused))
        self.assertEqual('compute1', finding.connector['host'])

    def test_forced_down_host_without_a_grant_is_still_fenced(self):
        """Not also ``attached_not_exported``: one repair per attachment."""
        nova = cases.Nova([bdm(att='a1')], {'i1': 'active'},
                          forced_down=frozenset({'compute1'}))
        snap = snapshot([volume()], [attachment('a1')], {}, nova)
        self.assertEqual(['forced_down_host'], self.cases_of(snap))

    def test_reservation_of_a_forced_down_host_is_no_finding(self):
        """No connector: it never reached the backend."""
        nova = cases.Nova([bdm(att='a1', state='shelved_offloaded')],
                          {'i1': 'shelved_offloaded'},
                          forced_down=frozenset({'compute1'}))
        snap = snapshot([volume(status='reserved',
                                attach_status='reserved')],
                        [records.Attachment('a1', 'v1', 'reserved', 'i1',
                                            None, 'compute1', OLD)],
                        {}, nova)
        self.assertEqual([], self.cases_of(snap))

    def test_attached_host_not_granted(self):
        snap = snapshot([volume()], [attachment('a1')], {},
                        cases.Nova([bdm(att='a1', state='stopped')],
                                   {'i1': 'stopped'}))
        (finding,) = classify(snap)[0]
        self.assertEqual(('attached_not_exported', 'a1', cases.DETACH),
                         (finding.case, finding.attachment_id,
                          finding.action))
        self.assertIn('instance i1 is stopped', finding.refused)

    def test_client_backends_do_not_need_a_holder_per_attachment(self):
        snap = snapshot([volume()], [attachment('a1')], {}, grants=False)
        self.assertEqual([], self.cases_of(snap))

    def test_attachment_nova_forgot(self):
        snap = snapshot([volume()], [attachment('a1')], {'v1': [acl()]},
                        cases.Nova([], {}))
        (finding,) = classify(snap)[0]
        self.assertEqual(('attachment_without_bdm', 'a1', None),
                         (finding.case, finding.attachment_id,
                          finding.refused))
        self.assertEqual('instance deleted has no mapping of it',
                         finding.evidence)

    def test_without_nova_the_nova_cases_are_not_checked(self):
        snap = snapshot([volume()], [attachment('a1')], {'v1': [acl()]})
        self.assertEqual([], self.cases_of(snap))

    def test_mapping_cinder_forgot_is_novas_to_repair(self):
        snap = snapshot([volume(status='available',
                                attach_status='detached')], [], {},
                        cases.Nova([bdm(att='gone')], {'i1': 'active'}))
        (finding,) = classify(snap)[0]
        self.assertEqual(('bdm_without_attachment', 'gone'),
                         (finding.case, finding.attachment_id))
        self.assertIn('Nova', finding.refused)

    def test_listing_mappings_match_by_instance_and_volume(self):
        snap = snapshot([volume()], [attachment('a1')], {'v1': [acl()]},
                        cases.Nova([bdm(att=None)], {'i1': 'active'}))
        self.assertEqual([], self.cases_of(snap))

    def test_mapping_of_another_attachment_id_does_not_match(self):
        snap = snapshot([volume()], [attachment('a1')], {'v1': [acl()]},
                        cases.Nova([bdm(att='a0')], {'i1': 'active'}))
        self.assertEqual(['attachment_without_bdm', 'bdm_without_attachment'],
                         self.cases_of(snap))

    @ddt.data(None, 'deleted')
    def test_reservation_of_a_deleted_instance(self, state):
        res = attachment('a1', host=None, status='reserved')
        instances = {} if state is None else {'i1': state}
        snap = snapshot([volume(status='reserved',
                                attach_status='detached')], [res], {},
                        cases.Nova([], instances))
        (finding,) = classify(snap)[0]
        self.assertEqual(('reserved_orphan', cases.DETACH, None),
                         (finding.case, finding.action, finding.refused))

    def test_reservation_of_a_shelved_offloaded_instance_is_normal(self):
        res = attachment('a1', host=None, status='reserved')
        snap = snapshot([volume(status='reserved',
                                attach_status='detached')], [res], {},
                        cases.Nova([bdm(att='a1',
                                        state='shelved_offloaded')],
                                   {'i1': 'shelved_offloaded'}))
        self.assertEqual([], self.cases_of(snap))

    def test_reservation_of_an_active_instance_is_refused(self):
        res = attachment('a1', host=None, status='reserved')
        snap = snapshot([volume(status='reserved',
                                attach_status='detached')], [res], {},
                        cases.Nova([bdm(att='a1')], {'i1': 'active'}))
        (finding,) = classify(snap)[0]
        self.assertEqual('reserved_orphan', finding.case)
        self.assertIn('instance i1 is active', finding.refused)

    @ddt.data('attaching', 'detaching')
    def test_stuck_transition(self, status):
        snap = snapshot([volume(status=status)], [attachment('a1')],
                        {'v1': [acl()]},
                        cases.Nova([bdm(att='a1', state='deleted')], {}))
        found = {f.case: f for f in classify(snap)[0]}
        self.assertEqual(cases.DETACH_ALL, found['stuck_transition'].action)
        self.assertIsNone(found['stuck_transition'].refused)

    def test_stuck_transition_of_an_active_instance_is_refused(self):
        snap = snapshot([volume(status='detaching')], [attachment('a1')],
                        {'v1': [acl()]},
                        cases.Nova([bdm(att='a1')], {'i1': 'active'}))
        (finding,) = classify(snap)[0]
        self.assertEqual('stuck_transition', finding.case)
        self.assertEqual('instance i1 is active on a live block device '
                         'mapping of attachment a1', finding.refused)

    def test_without_nova_an_instances_attachment_is_not_detached(self):
        snap = snapshot([volume(status='detaching')], [attachment('a1')],
                        {'v1': [acl()]})
        (finding,) = classify(snap)[0]
        self.assertIn('Nova was not consulted', finding.refused)

    def test_in_use_without_attachment(self):
        snap = snapshot([volume()], [], {})
        (finding,) = classify(snap)[0]
        self.assertEqual(('in_use_without_attachment', cases.DETACH_ALL),
                         (finding.case, finding.action))

    def test_interrupted_force_detach_is_finished(self):
        c1 = {'host': 'compute1', 'initiator': IQN1}
        snap = snapshot([volume(in_teardown=[c1])],
                        [attachment('a1'), attachment('a2', host='compute2',
                                                      iqn=IQN2,
                                                      instance='i2')],
                        {'v1': [acl(IQN2)]},
                        cases.Nova([bdm(att='a1', state='deleted'),
                                    bdm('i2', att='a2')],
                                   {'i2': 'active'}))
        (finding,) = classify(snap)[0]
        self.assertEqual(('interrupted_force_detach', cases.RESUME, [c1],
                          'compute1', None),
                         (finding.case, finding.action, finding.connectors,
                          finding.host, finding.refused))

    def test_interrupted_force_detach_of_an_active_instance_is_refused(self):
        snap = snapshot([volume(in_teardown=[None])], [attachment('a1')],
                        {'v1': [acl()]},
                        cases.Nova([bdm(att='a1')], {'i1': 'active'}))
        (finding,) = classify(snap)[0]
        self.assertEqual(('interrupted_force_detach', '*'),
                         (finding.case, finding.host))
        self.assertIn('instance i1 is active', finding.refused)

    def test_fence_outliving_its_volume(self):
        fences = [records.Fence('127.0.0.11:0/1', 'v1', True),
                  records.Fence('127.0.0.11:0/2', 'v2', True),
                  records.Fence('127.0.0.11:0/3', 'v3', False)]
        snap = snapshot([volume('v1', deleted=True, status='deleted'),
                         volume('v2', status='available',
                                attach_status='detached')],
                        holders={}, fences=fences, grants=False)
        (finding,) = classify(snap)[0]
        self.assertEqual(('stale_fence', 'v1', '127.0.0.11:0/1',
                          cases.LIFT_FENCE),
                         (finding.case, finding.volume_id, finding.addr,
                          finding.action))

    def test_holder_of_no_cinder_volume_is_reported_for_hand_removal(self):
        snap = snapshot([], [], {'name:volume-x': [acl()]})
        (finding,) = classify(snap)[0]
        self.assertEqual(('leaked_export', 'name:volume-x'),
                         (finding.case, finding.volume_id))
        self.assertIn('by hand', finding.refused)

    def test_recent_volumes_are_left_for_the_next_run(self):
        recent = NOW - datetime.timedelta(seconds=30)
        snap = snapshot([volume(updated_at=recent)], [], {},
                        cases.Nova([bdm(att='gone')], {}))
        findings, skipped = classify(snap, grace=60)
        self.assertEqual([], findings)
        self.assertEqual({'changed within the grace period': 1},
                         dict(skipped))
        self.assertEqual(
            ['bdm_without_attachment', 'in_use_without_attachment'],
            self.cases_of(snap, grace=0))

    def test_unreachable_or_unaudited_backend_volumes_are_counted(self):
        snap = snapshot([volume(), volume('v2', backend='node2@rbd')])
        snap.backends[BACKEND].error = 'tgtd down'
        findings, skipped = classify(snap)
        self.assertEqual([], findings)
        self.assertEqual({'backend node1@tgt unreachable': 1,
                          'backend node2@rbd not audited': 1},
                         dict(skipped))

    def test_rows_show_repair_and_result(self):
        snap = snapshot([volume()], [], {})
        row = classify(snap)[0][0].row()
        self.assertEqual(set(cases.COLUMNS), set(row))
        self.assertEqual(('force-detach volume', 'found'),
                         (row['repair'], row['result']))


class NovaFromServersTestCase(testtools.TestCase):

    def test_each_volume_of_each_server_is_a_mapping(self):
        nova = cases.Nova.from_servers([
            {'id': 'i1', 'OS-EXT-STS:vm_state': 'active',
             'OS-EXT-SRV-ATTR:host': 'compute1',
             cases.SERVER_VOLUMES: [{'id': 'v1'}, {'id': 'v2'}]},
            {'id': 'i2', cases.SERVER_VOLUMES: []}])
        self.assertEqual({'i1': 'active', 'i2': 'unknown'}, nova.instances)
        self.assertEqual([records.Bdm('i1', 'v1', None, 'active', 'compute1'),
                          records.Bdm('i1', 'v2', None, 'active',
                                      'compute1')], nova.bdms)
        self.assertIsNotNone(nova.bdm_of(attachment('a1', instance='i1')))
