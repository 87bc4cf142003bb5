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

"""The grammar every tool-facing connector field is checked against."""

from cinder import exception
import ddt
import testtools

from cinder_forcedetach import connector_grammar

VALID_NAMES = (
    'iqn.1993-08.org.debian:01:cad181614cec',
    'iqn.2004-10.com.ubuntu:01:7f3e2b9a1c',
    'iqn.1991-05.com.microsoft:host-1.example.com',
    'iqn.2026-11.org.cinder-forcedetach.test:compute_1',
    'iqn.2010-10.org.openstack',
    'eui.02004567A425678D',
    'naa.52004567BA64678D',
    'naa.52004567BA64678D52004567BA64678D',
)
HOSTILE_NAMES = (
    'iqn.2026-01.org.example:a,initiator-address=ALL',
    'iqn.2026-01.org.example:c\ninitiator-address=ALL',
    'iqn.2026-01.org.example:b\nALL',
    'iqn.2026-01.org.example:d e',
    'iqn.2026-01.org.example:f=1',
    'iqn.2026-13.org.example:bad-month',
    'iqn.26-01.org.example:short-year',
    'iqn.2026-01.-org.example:label',
    'iqn.2026-01.org.example:' + 'x' * 300,
    'iqn.2026-01.org.example:\u00e4',
    'eui.02004567A425678',
    'naa.52004567BA64678DX',
    'ALL', 'fake', '', ' ', None, 42, ['iqn.2026-01.org.example:a'],
)


@ddt.ddt
class GrammarTestCase(testtools.TestCase):

    @ddt.data(*VALID_NAMES)
    def test_iscsi_name_accepted(self, name):
        self.assertTrue(connector_grammar.is_iscsi_name(name))
        connector_grammar.check({'initiator': name})

    @ddt.data(*HOSTILE_NAMES)
    def test_iscsi_name_refused(self, name):
        self.assertFalse(connector_grammar.is_iscsi_name(name))
        if name is None:
            return          # absent: only a driver that requires it refuses
        err = self.assertRaises(exception.InvalidConnectorException,
                                connector_grammar.check, {'initiator': name})
        self.assertIn('initiator: %r' % (name,), str(err))

    @ddt.data(
        {'wwpns': ['50014380186af83c', '50:01:43:80:18:6a:f8:3e']},
        {'wwnns': '50014380186af83d'},
        {'host': 'compute-1.example.org'}, {'host': 'compute_1'},
        {'host': '127.0.0.1'}, {'host': '::1'},
        {'ip': '198.51.100.7'}, {'ip': 'fe80::1'},
        {'platform': 'x86_64', 'os_type': 'linux', 'multipath': False,
         'do_local_attach': False, 'mountpoint': '/dev/vdb'},
    )
    def test_fields_accepted(self, connector):
        self.assertIs(connector, connector_grammar.check(connector))

    @ddt.unpack
    @ddt.data(
        ('wwpns', {'wwpns': ['50014380186af83c,initiator-address=ALL']}),
        ('wwpns', {'wwpns': []}),
        ('wwpns', {'wwpns': '5001438018'}),
        ('wwnns', {'wwnns': [7]}),
        ('host', {'host': 'compute1\ninitiator-address=ALL'}),
        ('host', {'host': 'compute 1'}),
        ('host', {'host': '../../etc'}),
        ('host', {'host': 'a' * 300}),
        ('ip', {'ip': '127.0.0.1,ALL'}),
        ('ip', {'ip': 'ALL'}),
        ('ip', {'ip': 2130706433}),
    )
    def test_fields_refused(self, field, connector):
        err = self.assertRaises(exception.InvalidConnectorException,
                                connector_grammar.check, connector)
        self.assertIn(field, str(err))

    def test_required_and_type(self):
        self.assertRaises(exception.InvalidConnectorException,
                          connector_grammar.check, {'host': 'h'},
                          ('initiator',))
        self.assertRaises(exception.InvalidConnectorException,
                          connector_grammar.check, 'iqn.2026-01.org.a:b')
