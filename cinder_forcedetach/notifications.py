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

"""The notifications this package sends, through Cinder's notifier.

Payloads carry ids, host names, initiator names and client addresses:
never connection_info, CHAP credentials or keys.
"""

from cinder import rpc
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

#: A host's access was cut outside Cinder's own detach; ``reason`` says
#: who cut it (``grant``: fence on grant; ``reconciler``).
DETACH_FORCED = 'forcedetach.detach.forced'
#: One reconciler pass, with its counts.
RECONCILE_PASS = 'forcedetach.reconcile.pass'


def notify(context, host, event, payload, priority='info'):
    """Send *event*; a process without messaging (the CLI) sends nothing.

    A failure to notify is logged, never raised: what it reports is done.
    """
    if not rpc.initialized():
        return
    try:
        notifier = rpc.get_notifier('volume', host)
        getattr(notifier, priority)(context, event, payload)
    except Exception:
        LOG.warning('Could not notify %s.', event, exc_info=True)
