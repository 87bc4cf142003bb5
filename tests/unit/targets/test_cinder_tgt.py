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

"""What :class:`VolumeExports` tells the audit, and what it reads of tgtd."""

import types

from cinder.volume import configuration
import fixtures
import testtools

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach import host_access
from cinder_forcedetach.targets import base
from cinder_forcedetach.targets import cinder_tgt
from cinder_forcedetach.targets import tgtadm

PREFIX = 'iqn.2010-10.org.openstack:'
IQN1 = 'iqn.2026-11.org.example:c1'
IQN2 = 'iqn.2026-11.org.example:c2'


class _Targets(object):
    def __init__(self, states):
        self.states = states

    def list_targets(self):
        return {s.name: s for s in self.states}


def _exports(*states):
    conf = configuration.Configuration(cinder_tgt.tgt_opts)
    conf.target_prefix = PREFIX
    return cinder_tgt.VolumeExports(conf, target=_Targets(states))


class HoldersTestCase(testtools.TestCase):

    def test_acls_sessions_rules_and_bare_exports(self):
        exports = _exports(
            base.TargetState(1, PREFIX + 'volume-a', acls=[IQN1],
                             sessions=[base.Session(1, IQN2, [1])]),
            base.TargetState(2, PREFIX + 'volume-b',
                             address_acls=['ALL']),
            base.TargetState(3, PREFIX + 'volume-c'),
            base.TargetState(4, 'iqn.other:not-ours', acls=[IQN1]))
        holders = exports.holders()
        self.assertEqual({'volume-a', 'volume-b', 'volume-c'}, set(holders))
        self.assertEqual(
            [host_access.Holder('acl', frozenset({'iqn:' + IQN1}), IQN1,
                                {'initiator': IQN1}),
             host_access.Holder('session', frozenset({'iqn:' + IQN2}), IQN2,
                                {'initiator': IQN2})], holders['volume-a'])
        self.assertEqual([host_access.Holder(
            'address-acl', frozenset({host_access.ANY_HOST}), 'ALL', None)],
            holders['volume-b'])
        self.assertEqual([host_access.Holder(
            'export', frozenset(), PREFIX + 'volume-c', None)],
            holders['volume-c'])


class OfflineHoldersTestCase(testtools.TestCase):

    def test_an_offline_target_is_an_export_nobody_reaches(self):
        """Revoked for every host: what it still lists lets nobody in."""
        name = PREFIX + 'volume-a'
        exports = _exports(tgtadm.TgtTargetState(
            1, name, ready=False, acls=[IQN1], address_acls=['ALL'],
            sessions=[base.Session(1, IQN2, [1])]))
        self.assertEqual(
            {'volume-a': [host_access.Holder('export', frozenset(), name,
                                             None)]}, exports.holders())


class _Volume(dict):
    """What VolumeExports reads of a volume: ``vol['x']`` and ``vol.x``."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key)


def _attachment(host, status='attached', initiator=None):
    return types.SimpleNamespace(
        id='att-' + host, attach_status=status,
        connector={'host': host, 'initiator': initiator or
                   'iqn.2026-11.org.example:' + host})


class _Recorder(object):
    """A TgtAdm stand-in: what VolumeExports asks of the target layer."""

    def __init__(self, state=None):
        self.state = state
        self.calls = []

    def tid_of(self, name):
        self.calls.append(('tid_of', name))
        return self.state.tid if self.state else None

    def find(self, name):
        self.calls.append(('find', name))
        return self.state

    def revoke(self, name, initiators=None, keep=(), known=()):
        self.calls.append(('revoke', name, initiators, list(keep),
                           list(known)))
        return []

    def unexport(self, name, state=None, accounts=()):
        self.calls.append(('unexport', name, state, list(accounts)))

    def export(self, name, path, username=None, password=None):
        self.calls.append(('export', name, path, username, password))
        return tgtadm.TgtTargetState(tid=9, name=name)

    def grant(self, name, initiator, state=None):
        self.calls.append(('grant', name, initiator, state))


NAME = PREFIX + 'volume-1'


class VolumeExportsTestCase(testtools.TestCase):
    """Which reads of tgtd each VolumeExports operation makes."""

    def exports(self, state=None):
        conf = configuration.Configuration(cinder_tgt.tgt_opts)
        conf.target_prefix = PREFIX
        conf.target_ip_address = '127.0.0.1'
        conf.target_port = 3260
        conf.target_secondary_ip_addresses = []
        conf.forcedetach_chap_auth = True
        self.target = _Recorder(state)
        return cinder_tgt.VolumeExports(conf, target=self.target)

    def volume(self, attachments=(), **extra):
        return _Volume(id='1', name='volume-1',
                       provider_auth='CHAP user s3cret',
                       volume_attachment=list(attachments), **extra)

    def test_revoke_every_host_names_the_volume_hosts(self):
        exports = self.exports(tgtadm.TgtTargetState(tid=3, name=NAME))
        volume = self.volume([_attachment('c1'),
                              _attachment('c2', status='detached'),
                              _attachment('c3', initiator='iqn.x;reboot')])
        self.assertFalse(exports.revoke(volume, None))
        self.assertEqual(
            [('revoke', NAME, None, [], ['iqn.2026-11.org.example:c1',
                                         'iqn.2026-11.org.example:c2'])],
            self.target.calls)

    def test_remove_without_live_attachment_reads_no_acl(self):
        exports = self.exports(tgtadm.TgtTargetState(tid=3, name=NAME))
        exports.remove(self.volume([_attachment('c1', status='detached')]))
        self.assertEqual([('unexport', NAME, None, ['user'])],
                         self.target.calls)

    def test_remove_when_every_live_host_is_being_torn_down(self):
        c1 = _attachment('c1')
        for record in (
                fd_attachments.teardown_record([c1.connector]),
                fd_attachments.teardown_record([None]),
                fd_attachments.teardown_record([c1.connector], [c1.id])):
            exports = self.exports(tgtadm.TgtTargetState(
                tid=3, name=NAME, acls=[c1.connector['initiator']]))
            exports.remove(self.volume([c1], admin_metadata={
                fd_attachments.TEARDOWN_MARK: record}))
            self.assertEqual([('unexport', NAME, None, ['user'])],
                             self.target.calls, record)

    def test_remove_keeps_an_export_another_host_uses(self):
        c1, c2 = _attachment('c1'), _attachment('c2')
        state = tgtadm.TgtTargetState(tid=3, name=NAME,
                                      acls=[c2.connector['initiator']])
        for admin_metadata in (
                {fd_attachments.TEARDOWN_MARK:
                 fd_attachments.teardown_record([c1.connector])},
                {}, None):
            exports = self.exports(state)
            volume = self.volume([c1, c2])
            if admin_metadata is not None:
                volume['admin_metadata'] = admin_metadata
            exports.remove(volume)
            self.assertEqual([('find', NAME)], self.target.calls)

    def test_remove_of_an_offline_target_is_not_kept(self):
        c2 = _attachment('c2')
        state = tgtadm.TgtTargetState(tid=3, name=NAME, ready=False,
                                      acls=[c2.connector['initiator']])
        exports = self.exports(state)
        exports.remove(self.volume([c2], admin_metadata={}))
        self.assertEqual([('find', NAME), ('unexport', NAME, state,
                                           ['user'])], self.target.calls)

    def test_connect_grants_on_the_target_just_read(self):
        state = tgtadm.TgtTargetState(tid=3, name=NAME)
        exports = self.exports(state)
        info = exports.connect(self.volume(), {'initiator': IQN1},
                               '/v/volume-1')
        self.assertEqual([('find', NAME), ('grant', NAME, IQN1, state)],
                         self.target.calls)
        self.assertEqual(NAME, info['data']['target_iqn'])

    def test_connect_makes_an_offline_export_again(self):
        """Revoked for every host and not removed: never just re-opened."""
        state = tgtadm.TgtTargetState(tid=3, name=NAME, ready=False,
                                      acls=['iqn.2026-11.org.example:old'])
        exports = self.exports(state)
        exports.connect(self.volume(), {'initiator': IQN1}, '/v/volume-1')
        new = tgtadm.TgtTargetState(tid=9, name=NAME)
        self.assertEqual(
            [('find', NAME), ('unexport', NAME, state, []),
             ('export', NAME, '/v/volume-1', 'user', 's3cret'),
             ('grant', NAME, IQN1, new)], self.target.calls)

    def test_create_and_ensure_look_the_name_up_only(self):
        exports = self.exports(tgtadm.TgtTargetState(tid=3, name=NAME))
        volume = self.volume([_attachment('c1')])
        self.assertEqual(('127.0.0.1:3260 %s 1' % NAME, 'CHAP user s3cret'),
                         exports.create(volume, '/v/volume-1'))
        exports.ensure(volume, '/v/volume-1')
        self.assertEqual([('tid_of', NAME), ('tid_of', NAME)],
                         self.target.calls)

    def test_remake_of_an_offline_export_removes_it(self):
        state = tgtadm.TgtTargetState(tid=3, name=NAME, ready=False,
                                      acls=['iqn.2026-11.org.example:old'])
        exports = self.exports(state)
        lock = self.useFixture(fixtures.MockPatch(
            'cinder_forcedetach.locks.volume_lock')).mock
        exports.remake(self.volume(), '/v/volume-1')
        lock.assert_called_once_with('1')
        self.assertEqual([('find', NAME), ('unexport', NAME, state, [])],
                         self.target.calls)
