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

"""The initiator's outcome kinds, from texts qemu-io and libiscsi printed.

The texts are the ones recorded against a real tgtd (see the initiator
module's docstring).
"""

import testtools

from cinder_forcedetach.conformance import initiator

Outcome = initiator.Outcome
IQN = ' [iqn.2010-10.org.openstack:volume-1]'


class RefusalTestCase(testtools.TestCase):

    def test_refused_relogin(self):
        self.assertEqual(
            'login refused: Status: Target not found(515)',
            initiator.refusal(
                'libiscsi:1 Failed to log in to target. Status: Target not '
                'found(515)' + IQN + '\nlibiscsi:1 reconnect try 1 failed, '
                'waiting 1 seconds' + IQN + '\n'))
        self.assertEqual(
            'login refused: Status: Target error(768)',
            initiator.refusal('libiscsi:1 Failed to log in to target. '
                              'Status: Target error(768)' + IQN))

    def test_login_reset_by_the_target(self):
        self.assertIn('errno:104', initiator.refusal(
            'libiscsi:1 read from socket failed, errno:104' + IQN))
        self.assertIn('Connection reset by peer(104)', initiator.refusal(
            'libiscsi:1 iscsi_service: socket error Connection reset by '
            'peer(104).' + IQN))

    def test_lun_refused_at_open(self):
        self.assertIn('LOGICAL_UNIT_NOT_SUPPORTED', initiator.refusal(
            "qemu-io: can't open: iSCSI: Failed to connect to LUN : SENSE "
            "KEY:ILLEGAL_REQUEST(5) ASCQ:LOGICAL_UNIT_NOT_SUPPORTED(0x2500)"))

    def test_login_closed_at_open(self):
        hangup = ("libiscsi:1 iscsi_service_reconnect_if_loggedin. Can not "
                  "reconnect right now.\n" + IQN + "\nqemu-io: can't open: "
                  "iSCSI: Failed to connect to LUN : iscsi_service failed "
                  "with : iscsi_service_reconnect_if_loggedin. Can not "
                  "reconnect right now.\n\n")
        self.assertIn('login closed by the target',
                      initiator.refusal(hangup))
        # tgtd down: the same words after a refused TCP connection.
        self.assertIsNone(initiator.refusal(
            'libiscsi:1 iscsi_service: socket error Connection refused(111).'
            + IQN + '\n' + hangup))

    def test_relogin_closed_by_the_target(self):
        """A try that failed with no error: tgtd hung up the login."""
        tries = ''.join('libiscsi:1 reconnect try %d failed, waiting %d '
                        'seconds' % (n, n) + IQN + '\n' for n in (6, 7, 8))
        self.assertEqual('login closed by the target: reconnect try 8 '
                         'failed with no error', initiator.refusal(tries))
        # One try line alone: its error may be in an earlier output.
        self.assertIsNone(initiator.refusal(tries.splitlines()[0]))
        # tgtd down: each try logs the refused connection.
        self.assertIsNone(initiator.refusal(
            'libiscsi:1 iscsi_service: socket error Connection refused(111) '
            'while connecting.' + IQN + '\n' + tries))

    def test_no_refusal(self):
        for text in ('', 'qemu-io> ',
                     'libiscsi:1 SENSE KEY:UNIT_ATTENTION(6) '
                     'ASCQ:BUS_RESET(0x2900)' + IQN,
                     # tgtd down: nobody refused anything.
                     'libiscsi:1 iscsi_service: socket error Connection '
                     'refused(111) while connecting.' + IQN):
            self.assertIsNone(initiator.refusal(text), text)


class OutcomeTestCase(testtools.TestCase):

    def test_kinds(self):
        for kind in (Outcome.IO_ERROR, Outcome.LOGIN_REFUSED,
                     Outcome.RECONNECT_REFUSED):
            self.assertTrue(Outcome(kind, 'write').refused)
            self.assertFalse(Outcome(kind, 'write').ok)
        for kind in (Outcome.TIMED_OUT, Outcome.PROCESS_GONE,
                     Outcome.UNKNOWN, Outcome.MISMATCH, Outcome.WROTE):
            self.assertFalse(Outcome(kind, 'write').refused, kind)
        self.assertTrue(Outcome(Outcome.WROTE, 'write').ok)
        self.assertTrue(Outcome(Outcome.READ, 'read').ok)

    def test_no_truth_value(self):
        self.assertRaises(TypeError, bool, Outcome(Outcome.TIMED_OUT, 'w'))

    def test_describe_has_the_last_output(self):
        text = Outcome(Outcome.TIMED_OUT, 'write -P 0xee 0 4096',
                       'no answer in 3 s', 'x' * 5000 + 'the end',
                       pid=42).describe()
        self.assertIn('TIMED_OUT (write -P 0xee 0 4096): no answer', text)
        self.assertIn('pid 42', text)
        self.assertIn('the end', text)
        self.assertLess(len(text), 1700)
