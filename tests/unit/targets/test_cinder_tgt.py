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

"""What :class:`VolumeExports` tells the audit about its targets."""

from cinder.volume import configuration
import testtools

from cinder_forcedetach.audit import evidence
from cinder_forcedetach.targets import base
from cinder_forcedetach.targets import cinder_tgt

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
            [evidence.Holder('acl', frozenset({'iqn:' + IQN1}), IQN1,
                             {'initiator': IQN1}),
             evidence.Holder('session', frozenset({'iqn:' + IQN2}), IQN2,
                             {'initiator': IQN2})], holders['volume-a'])
        self.assertEqual([evidence.Holder(
            'address-acl', frozenset({evidence.ANY_HOST}), 'ALL', None)],
            holders['volume-b'])
        self.assertEqual([evidence.Holder(
            'export', frozenset(), PREFIX + 'volume-c', None)],
            holders['volume-c'])
