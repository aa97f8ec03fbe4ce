"""A real S3-compatible server for the tests: moto's standalone server (``moto_server``, pinned
in the lock file) started as its own process on 127.0.0.1, stopped afterwards. Nothing in the
tests patches boto3: requests go over HTTP to this process, as they would to a bucket."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from transfer_platform_tests.support.processes import listening

REGION = "us-east-1"
#: requests the server takes before it checks signatures: the setup below (a user, its key, its
#: policy); from then on a request signed with another key or secret is refused, as by S3
_SETUP_REQUESTS = 3


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    log: Path
    access_key: str  # a key of the server's own IAM user, allowed everything on S3 and IAM
    secret_key: str

    def client(self, **credentials: str):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=credentials.get("access_key", self.access_key),
                            aws_secret_access_key=credentials.get("secret_key", self.secret_key),
                            config=Config(s3={"addressing_style": "path"}))

    def iam(self):
        """An IAM client with the server's key: users of limited rights for a test (the server
        checks each request against its signer's policies)."""
        import boto3

        return boto3.client("iam", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)


@contextmanager
def s3_server(folder: Path) -> Iterator[S3Server]:
    server = Path(sys.executable).with_name("moto_server")
    log = folder / "moto_server.log"
    with listening("moto_server", [str(server), "-H", "127.0.0.1", "-p", "{port}"], log,
                   env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_REQUESTS)}) as port:
        endpoint = f"http://127.0.0.1:{port}"
        yield S3Server(endpoint, log, *_user_with_a_key(endpoint))


def _user_with_a_key(endpoint: str) -> tuple[str, str]:
    import json

    import boto3

    iam = boto3.client("iam", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="setup",
                       aws_secret_access_key="setup")
    iam.create_user(UserName="transfers")
    key = iam.create_access_key(UserName="transfers")["AccessKey"]
    iam.put_user_policy(UserName="transfers", PolicyName="s3", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:*", "iam:*"], "Resource": "*"}]}))
    return key["AccessKeyId"], key["SecretAccessKey"]
