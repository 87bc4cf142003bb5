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

"""Exit codes of every cinder-forcedetach command, and the error carrying one.

====  ======================================================================
0     success
1     usage error or bad input (bad JSON connector, HTTP 400, 401, 403)
2     not found (volume, attachment, backend: HTTP 404)
3     conflict or wrong state (HTTP 409; HTTP 400 for an invalid volume
      state)
4     backend or server error (HTTP 5xx)
5     endpoint unreachable (connection refused, timeout, no endpoint)
====  ======================================================================
"""

EXIT_OK = 0
EXIT_USAGE = 1
EXIT_NOT_FOUND = 2
EXIT_CONFLICT = 3
EXIT_BACKEND = 4
EXIT_UNREACHABLE = 5


class CliError(Exception):
    """An error with the exit code the command ends with."""

    def __init__(self, code, message):
        super(CliError, self).__init__(message)
        self.code = code
        self.message = message
