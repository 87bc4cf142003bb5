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

"""The one renderer: tables, JSON, values, secret masking."""

import io
import json

import testtools

from cinder_forcedetach.cmd import output


def render(fmt, data, columns=None):
    out = io.StringIO()
    if columns is None:
        output.Output(fmt, out).emit(data)
    else:
        output.Output(fmt, out).emit_list(data, columns)
    return out.getvalue()


class MaskTestCase(testtools.TestCase):

    def test_masks_secret_keys_only(self):
        info = {'auth_password': 'chap', 'auth_username': 'u',
                'keyring': 'AQ==', 'key': 'k', 'access_key': 'a',
                'secret': 's', 'token': 't', 'secret_uuid': 'uuid',
                'secret_type': 'ceph', 'empty_password': '',
                'nested': [{'discovery_auth_password': 'p'}]}
        masked = output.mask_secrets(info)
        for key in ('auth_password', 'keyring', 'key', 'access_key',
                    'secret', 'token'):
            self.assertEqual(output.MASK, masked[key], key)
        self.assertEqual(output.MASK,
                         masked['nested'][0]['discovery_auth_password'])
        for key in ('auth_username', 'secret_uuid', 'secret_type',
                    'empty_password'):
            self.assertEqual(info[key], masked[key], key)
        self.assertEqual('chap', info['auth_password'])  # a copy


class ObjectTestCase(testtools.TestCase):

    DATA = {'id': 'a1', 'info': {'hosts': ['h1', 'h2'], 'lun': 1,
                                 'none': None, 'empty': {}},
            'items': [{'x': 1}, {'x': 2}]}

    def test_table(self):
        self.assertEqual(
            '+------------+--------------+\n'
            '| Property   | Value        |\n'
            '+------------+--------------+\n'
            '| id         | a1           |\n'
            '| info.hosts | ["h1", "h2"] |\n'
            '| info.lun   | 1            |\n'
            '| info.none  |              |\n'
            '| info.empty | {}           |\n'
            '| items[0].x | 1            |\n'
            '| items[1].x | 2            |\n'
            '+------------+--------------+\n', render('table', self.DATA))

    def test_json(self):
        text = render('json', self.DATA)
        self.assertEqual(self.DATA, json.loads(text))
        self.assertEqual(json.dumps(self.DATA, indent=2, sort_keys=True) +
                         '\n', text)

    def test_value(self):
        self.assertEqual('a1\n["h1", "h2"]\n1\n\n{}\n1\n2\n',
                         render('value', self.DATA))


class ListTestCase(testtools.TestCase):

    FENCES = [{'addr': '127.0.0.1:0/1234', 'volume_id': 'v1',
               'hosts': ['compute1', 'compute2'], 'fenced_at': 't0',
               'expires_at': None, 'active': True, 'keyring': 'AQDsecret'}]

    def test_table(self):
        self.assertEqual(
            '+------------------+-------------------+--------+\n'
            '| addr             | hosts             | active |\n'
            '+------------------+-------------------+--------+\n'
            '| 127.0.0.1:0/1234 | compute1,compute2 | True   |\n'
            '+------------------+-------------------+--------+\n',
            render('table', self.FENCES, ('addr', 'hosts', 'active')))

    def test_empty_table(self):
        self.assertEqual('+------+\n| addr |\n+------+\n+------+\n',
                         render('table', [], ('addr',)))

    def test_json_masks_secrets(self):
        text = render('json', [output.mask_secrets(f) for f in self.FENCES],
                      ('addr',))
        self.assertNotIn('AQDsecret', text)
        self.assertEqual(output.MASK, json.loads(text)[0]['keyring'])

    def test_value(self):
        self.assertEqual('127.0.0.1:0/1234 compute1,compute2 \n',
                         render('value', self.FENCES,
                                ('addr', 'hosts', 'expires_at')))

    def test_module_functions(self):
        out = io.StringIO()
        output.emit_list(self.FENCES, ('volume_id',), 'table', out)
        self.assertIn('| v1        |', out.getvalue())
        out = io.StringIO()
        output.emit({'a': 1}, 'json', out)
        self.assertEqual({'a': 1}, json.loads(out.getvalue()))
