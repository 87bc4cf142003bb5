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

"""tools/stack.sh's backend list: names, driver aliases, errors."""

import ddt
import testtools

from cinder_forcedetach.tools import stack

TGT = stack.TGT_DRIVER
RBD = stack.RBD_DRIVER


@ddt.ddt
class ParseBackendsTestCase(testtools.TestCase):

    @ddt.unpack
    @ddt.data(
        ('tgt', [('tgt', TGT)]),
        ('tgt,rbd', [('tgt', TGT), ('rbd', RBD)]),
        (' a , ceph=rbd ,b=iscsi', [('a', TGT), ('ceph', RBD), ('b', TGT)]),
        ('x=my.pkg.Driver', [('x', 'my.pkg.Driver')]),
        ('rbd=tgt', [('rbd', TGT)]),
    )
    def test_parse(self, text, expected):
        self.assertEqual(expected, stack.parse_backends(text))

    @ddt.unpack
    @ddt.data((' , ', 'names no backend'), ('a,a=rbd', 'duplicate'),
              ('bad name', 'bad backend name'))
    def test_errors(self, text, message):
        err = self.assertRaises(stack.StackError, stack.parse_backends, text)
        self.assertIn(message, str(err))


class UsesCephTestCase(testtools.TestCase):

    def test_only_rbd_backends_need_ceph(self):
        st = stack.Stack.__new__(stack.Stack)
        self.assertFalse(st.uses_ceph({'backends': [['tgt', TGT]]}))
        # stack.json keeps the pairs as lists
        self.assertTrue(st.uses_ceph({'backends': [['tgt', TGT],
                                                   ['rbd', RBD]]}))
