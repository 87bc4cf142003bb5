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

"""Who gets fenced: client addresses, connectors, kept attachments."""

import ddt
import testtools

from cinder_forcedetach.ceph import fencing

A = {'host': 'compute1', 'ip': '127.0.0.11'}
B = {'host': 'compute2', 'ip': '127.0.0.12'}
ADDR_A = '127.0.0.11:0/1001'
ADDR_A2 = '127.0.0.11:0/1002'
ADDR_B = '127.0.0.12:0/2001'
ADDR_B2 = '127.0.0.22:0/2002'      # compute2's other address
ADDR_X = '127.0.0.99:0/9001'       # nobody's
OWN = '127.0.0.1:0/3001'


def no_dns(name):
    return []


@ddt.ddt
class SelectFenceTargetsTestCase(testtools.TestCase):

    def select(self, holders, connectors, keep=(), own=(OWN,),
               resolve=no_dns):
        return fencing.select_fence_targets(holders, own, connectors,
                                            keep, resolve=resolve)

    def unexplained(self, *args, **kwargs):
        """The holders the selection refuses to decide on."""
        try:
            result = self.select(*args, **kwargs)
        except fencing.UnexplainedClients as err:
            return err.clients
        self.fail('no error; selected %s' % (result,))

    def test_every_host_but_never_ourselves(self):
        targets, spared = self.select([ADDR_A, ADDR_B, OWN], [None])
        self.assertEqual([ADDR_A, ADDR_B], targets)
        self.assertEqual([(OWN, 'this driver')], spared)

    def test_no_attachment_stays_every_other_holder_is_fenced(self):
        """Nothing in Cinder explains any client: whatever its IP."""
        targets, spared = self.select(
            [ADDR_A, ADDR_B, ADDR_A2, ADDR_X, OWN], [A])
        self.assertEqual(sorted([ADDR_A, ADDR_A2, ADDR_B, ADDR_X]), targets)
        self.assertEqual([(OWN, 'this driver')], spared)

    def test_multiattach_keeps_the_attachment_that_stays(self):
        for connectors in ([A], [None]):
            targets, spared = self.select([ADDR_A, ADDR_B, OWN], connectors,
                                          keep=[B])
            self.assertEqual([ADDR_A], targets)
            self.assertEqual({(ADDR_B, 'an attachment that stays'),
                              (OWN, 'this driver')}, set(spared))

    def test_unexplained_client_fails(self):
        """compute2's client at an address its connector does not name."""
        clients = self.unexplained([ADDR_A, ADDR_B, ADDR_B2, OWN], [A],
                                   keep=[B])
        self.assertEqual([(ADDR_B2, fencing.UNEXPLAINED)], clients)

    def test_ambiguous_client_fails(self):
        """Two hosts claim one IP: fencing or sparing could be wrong."""
        twin = {'host': 'compute3', 'ip': '127.0.0.11'}
        clients = self.unexplained([ADDR_A, OWN], [A], keep=[twin])
        self.assertEqual([(ADDR_A, fencing.AMBIGUOUS)], clients)

    def test_attachment_without_connector_explains_nothing(self):
        """A kept attachment with no connector (legacy attach)."""
        clients = self.unexplained([ADDR_A, ADDR_B], [A], keep=[None])
        self.assertEqual([(ADDR_B, fencing.UNEXPLAINED)], clients)
        # and a detached one without connector explains nothing either
        clients = self.unexplained([ADDR_A, ADDR_B], [], keep=[B])
        self.assertEqual([(ADDR_A, fencing.UNEXPLAINED)], clients)

    def test_host_keeping_another_attachment_is_not_detached(self):
        """Two attachments from one host: keeping one keeps its access."""
        targets, spared = self.select([ADDR_A], [A], keep=[dict(A)])
        self.assertEqual([], targets)
        self.assertEqual([(ADDR_A, 'an attachment that stays')], spared)

    def test_host_names_resolve_to_every_address(self):
        dns = {'compute1': ['127.0.0.11', '127.0.0.21'],
               'compute2': ['127.0.0.12', '127.0.0.22']}.get
        addr_a3 = '127.0.0.21:0/1003'
        targets, spared = self.select([ADDR_A, addr_a3, ADDR_B2, OWN], [A],
                                      keep=[B], resolve=dns)
        self.assertEqual([ADDR_A, addr_a3], targets)
        self.assertEqual({(ADDR_B2, 'an attachment that stays'),
                          (OWN, 'this driver')}, set(spared))

    @ddt.data('v1:127.0.0.11:0/1001', '[v1:127.0.0.11:0/1001]',
              'any:127.0.0.11:0/1001', ' 127.0.0.11:0/1001 ')
    def test_address_forms_and_duplicates(self, form):
        targets, _spared = self.select([form, ADDR_A], [A], keep=[B])
        self.assertEqual([ADDR_A], targets)

    def test_nothing_holds_it(self):
        self.assertEqual(([], []), self.select([], [A], keep=[B]))

    def test_connector_ips(self):
        def dns(name):
            return {'compute1': ['127.0.0.21', '::1']}.get(name, [])
        self.assertEqual({'127.0.0.12'},
                         fencing.connector_ips({'host': '127.0.0.12'},
                                               resolve=self.fail))
        self.assertEqual({'127.0.0.11', '127.0.0.21', '::1'},
                         fencing.connector_ips(A, resolve=dns))
        self.assertEqual({'127.0.0.21', '::1'},
                         fencing.connector_ips({'host': 'compute1'},
                                               resolve=dns))
        self.assertEqual({'127.0.0.12'},
                         fencing.connector_ips(B, resolve=dns))
        self.assertEqual(set(), fencing.connector_ips(None))

    def test_unexplained_error_names_the_client_and_the_way_out(self):
        err = fencing.UnexplainedClients(
            [(ADDR_B2, fencing.UNEXPLAINED)])
        reason = fencing._unexplained(err, [
            ('watcher', ADDR_B2), ('lock owner', 'v1:' + ADDR_B2),
            ('watcher', ADDR_A)])
        self.assertIn('client %s (lock owner, watcher)' % ADDR_B2, reason)
        self.assertIn(fencing.UNEXPLAINED, reason)
        self.assertNotIn(ADDR_A, reason)
        self.assertIn('nothing was fenced', reason)
        self.assertIn('without a connector', reason)
        self.assertIn('refresh', reason)


@ddt.ddt
class AddressTestCase(testtools.TestCase):

    @ddt.unpack
    @ddt.data(('127.0.0.11:0/99', '127.0.0.11'),
              ('v2:10.0.0.1:6800/5', '10.0.0.1'),
              ('[::1]:0/5', '::1'),
              ('[v1:[fd00::2]:0/7]', 'fd00::2'))
    def test_addr_ip(self, addr, ip):
        self.assertEqual(ip, fencing.addr_ip(addr))
