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

"""What Cinder's database and Nova say, as plain records.

The audit reads Cinder's database, each backend (:mod:`cinder_forcedetach.
host_access` holders) and Nova in bulk into these records, then classifies
(:mod:`.cases`) without touching any source.  Records carry no secrets: no
connection_info, no CHAP credentials.
"""

import collections

Volume = collections.namedtuple('Volume', [
    'id', 'name', 'status', 'attach_status', 'backend', 'updated_at',
    'deleted', 'in_teardown'])
Volume.__doc__ = """A row of Cinder's volumes table.

``backend``: ``host@backend``, without the pool.  ``in_teardown``: None,
or the connectors an interrupted force-detach was revoking (``None`` in
the list: every host), from its record in the admin metadata.
"""

Attachment = collections.namedtuple('Attachment', [
    'id', 'volume_id', 'attach_status', 'instance_uuid', 'connector',
    'attached_host', 'updated_at'])
Attachment.__doc__ = """A live row of Cinder's volume_attachment table
(``connector``: the host's connector, without secrets, or None)."""

Bdm = collections.namedtuple('Bdm', [
    'instance_uuid', 'volume_id', 'attachment_id', 'vm_state', 'host'])
Bdm.__doc__ = """A volume block device mapping of a Nova instance."""

Fence = collections.namedtuple('Fence', ['addr', 'volume_id', 'active'])
Fence.__doc__ = """A fence a force-detach recorded (an RBD blocklist entry)."""
