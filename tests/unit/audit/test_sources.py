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

"""Reading sources: what does not need Cinder's database or a backend."""

import json
import os

import fixtures
import testtools

from cinder_forcedetach.audit import cases
from cinder_forcedetach.audit import records
from cinder_forcedetach.audit import sources
from cinder_forcedetach import host_access


class _Driver(object):
    audit_grants = False

    def __init__(self, holders=None, error=None, fences=None):
        self._holders, self._error, self._fences = holders, error, fences

    def audit_holders(self):
        if self._error:
            raise self._error
        return self._holders

    def list_fences(self):
        return self._fences or []


class _Cinder(object):
    """CinderDB's name parsing, with deleted rows from a dict."""

    def __init__(self, deleted):
        self.deleted_rows = deleted
        self.asked = []
        self.name_pattern = sources._name_pattern('volume-%s')

    volume_id_of = sources.CinderDB.volume_id_of

    def deleted(self, ids):
        self.asked.append(sorted(ids))
        return {i: self.deleted_rows[i] for i in ids
                if i in self.deleted_rows}


def _volume(vid, deleted=False):
    return records.Volume(vid, 'volume-%s' % vid, 'available', 'detached',
                          None, None, deleted, None)


HOLDER = host_access.Holder('watcher', frozenset({'ip:10.0.0.1'}),
                            '10.0.0.1:0/1', {'ip': '10.0.0.1'})


class ReadBackendTestCase(testtools.TestCase):

    def test_holders_and_fences(self):
        backend = sources.read_backend('n@rbd', _Driver(
            {'volume-a': [HOLDER]},
            fences=[{'addr': '1.2.3.4:0/5', 'volume_id': 'a',
                     'active': True, 'hosts': ['x']}]))
        self.assertEqual((False, None, {'volume-a': [HOLDER]}),
                         (backend.grants, backend.error, backend.holders))
        self.assertEqual([records.Fence('1.2.3.4:0/5', 'a', True)],
                         backend.fences)

    def test_driver_without_audit_support(self):
        backend = sources.read_backend('n@x', _Driver(
            error=NotImplementedError()))
        self.assertIn('cannot list what it exports', backend.error)

    def test_backend_error_is_named(self):
        backend = sources.read_backend('n@x', _Driver(
            error=OSError('tgtd down')))
        self.assertEqual('OSError: tgtd down', backend.error)


class AttachHoldersTestCase(testtools.TestCase):

    def test_holders_keyed_by_volume_id_deleted_ones_added(self):
        volumes = {'a': _volume('a')}
        cinder = _Cinder({'b': _volume('b', deleted=True),
                          'f': _volume('f', deleted=True)})
        backend = cases.Backend('n@rbd', holders={
            'volume-a': [HOLDER], 'volume-b': [HOLDER],
            'stranger': [HOLDER]},
            fences=[records.Fence('x', 'f', True)])
        sources.attach_holders(backend, cinder, volumes)
        self.assertEqual({'a', 'b', 'name:stranger'}, set(backend.holders))
        self.assertEqual({'a', 'b', 'f'}, set(volumes))
        self.assertEqual(('n@rbd', True), (volumes['b'].backend,
                                           volumes['b'].deleted))
        self.assertEqual([['b', 'f']], cinder.asked)


class ReadNovaFileTestCase(testtools.TestCase):

    def write(self, data):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'nova.json')
        with open(path, 'w') as f:
            f.write(data if isinstance(data, str) else json.dumps(data))
        return path

    def test_mappings_and_instances(self):
        nova = sources.read_nova_file(self.write({
            'instances': {'i2': 'deleted'},
            'bdms': [{'instance_uuid': 'i1', 'volume_id': 'v1',
                      'attachment_id': 'a1', 'vm_state': 'active'}]}))
        self.assertEqual([records.Bdm('i1', 'v1', 'a1', 'active', None)],
                         nova.bdms)
        self.assertEqual({'i1': 'active', 'i2': 'deleted'}, nova.instances)
        self.assertEqual(frozenset(), nova.forced_down)

    def test_forced_down_hosts(self):
        nova = sources.read_nova_file(self.write({
            'forced_down_hosts': ['compute1', 'compute1', 'compute2']}))
        self.assertEqual({'compute1', 'compute2'}, nova.forced_down)

    def test_bad_files_are_a_clear_error(self):
        for data in ('not json', {'bdms': [{'volume_id': 'v'}]},
                     {'bdms': 5}, {'forced_down_hosts': [1]},
                     {'forced_down_hosts': 5}):
            err = self.assertRaises(ValueError, sources.read_nova_file,
                                    self.write(data))
            self.assertIn('cannot read Nova mappings', str(err))
        self.assertRaises(ValueError, sources.read_nova_file, '/nonexistent')


class NamePatternTestCase(testtools.TestCase):

    def test_template_with_suffix(self):
        pattern = sources._name_pattern('vol-%s.img')
        self.assertEqual('abc', pattern.match('vol-abc.img').group(1))
        self.assertIsNone(pattern.match('volume-abc'))


class BackendResolverTestCase(testtools.TestCase):

    def test_hosts_and_cluster_members(self):
        backend_of = sources.backend_resolver('c1', ['node1@tgt'])
        self.assertEqual('node1@tgt', backend_of('node1@tgt#pool'))
        self.assertEqual('node1@tgt', backend_of('node2@tgt#pool',
                                                 'c1@tgt#pool'))
        self.assertEqual('node2@rbd', backend_of('node2@rbd#p', 'c1@rbd'))
        self.assertEqual('node2@tgt', backend_of('node2@tgt', 'c2@tgt'))
        self.assertIsNone(backend_of(None))
        alone = sources.backend_resolver(None, ['node1@tgt'])
        self.assertEqual('node2@tgt', alone('node2@tgt', 'c1@tgt'))
