# SPDX-License-Identifier: MIT
"""The S3 settings as keyword arguments of ckptfs.open, ckptfs.load and
ckptfs.StorageReader (issue 20): each is checked (type, range) before C,
reaches the library (its own messages come back: the endpoint that does
not answer, the file an option names, the library's bounds), and no
credential is ever an argument.  Reads against a real radosgw are in
tests/bats/s3*.bats."""
import os

import pytest

import ckptfs
from ckptfs import _args, _lib
from ckptfs.handle import _s3_struct

ROOT = "s3://ck-bucket/run"


@pytest.mark.parametrize("kw,exc,text", [
    (dict(s3_secret_key="x"), TypeError, "unexpected keyword argument 's3_secret_key'"),
    (dict(s3_access_key="x"), TypeError, "unexpected keyword argument"),
    (dict(aws_secret_access_key="x"), TypeError, "unexpected keyword argument"),
    (dict(s3_parallel=0), ValueError, "s3_parallel must be at least 1, got '0'"),
    (dict(s3_parallel=1.5), TypeError, "s3_parallel must be an integer"),
    (dict(s3_retries=-1), ValueError, "s3_retries must be a whole number"),
    (dict(s3_part_size="8M"), TypeError, "s3_part_size must be an integer"),
    (dict(s3_timeout_ms=2**32), ValueError, "s3_timeout_ms must be at most"),
    (dict(s3_endpoint=""), ValueError, "s3_endpoint needs a value"),
    (dict(s3_endpoint="http://a\0b"), ValueError, "s3_endpoint contains a NUL"),
    (dict(s3_region=5), TypeError, "s3_region must be a str"),
    (dict(s3_no_sign_request="yes"), TypeError,
     "s3_no_sign_request must be True or False, not str"),
    (dict(s3_no_sign_request=1), TypeError,
     "s3_no_sign_request must be True or False, not int"),
])
@pytest.mark.parametrize("fn", ["load", "open", "reader"])
def test_bad_s3_arguments(fn, kw, exc, text, request):
    if fn == "reader":
        reader = request.getfixturevalue("ckptfs_torch").StorageReader
    with pytest.raises(exc) as e:
        if fn == "load":
            ckptfs.load(ROOT, 2, 1, **kw)
        elif fn == "open":
            ckptfs.open(ROOT, **kw)
        else:
            reader(ROOT, **kw)
    assert text in str(e.value)


@pytest.fixture(scope="module")
def ckptfs_torch():
    """ckptfs.torch, with the test helper's hook (torch 1.13 on Python
    3.11) installed first."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))), "scripts"))
    import torch_dcp_compat
    torch_dcp_compat.install()
    import ckptfs.torch
    return ckptfs.torch


def test_struct_fields():
    o = _s3_struct(_args.s3_options(dict(
        s3_endpoint="http://127.0.0.1:7480", s3_region="eu-west-1",
        s3_profile="p", s3_credentials_file="/c", s3_config_file="/f",
        s3_parallel=4, s3_part_size=1 << 20, s3_merge_gap=4096,
        s3_retries=0, s3_timeout_ms=500, s3_no_sign_request=True,
        s3_ca_bundle="/ca.pem")))
    assert o.endpoint == b"http://127.0.0.1:7480"
    assert o.ca_bundle == b"/ca.pem"
    assert o.region == b"eu-west-1" and o.profile == b"p"
    assert o.credentials_file == b"/c" and o.config_file == b"/f"
    assert (o.parallel, o.part_bytes, o.merge_gap) == (4, 1 << 20, 4096)
    assert o.retries == _lib.S3_NO_RETRIES and o.timeout_ms == 500
    assert o.access_key is None and o.secret_key is None
    assert o.no_sign_request is True
    assert not _s3_struct(_args.s3_options(dict(
        s3_region="r", s3_no_sign_request=False))).no_sign_request
    assert _s3_struct(_args.s3_options(dict(s3_region=None))) is None


def test_time_bounds_and_caps():
    o = _s3_struct(_args.s3_options(dict(
        s3_connect_timeout_ms=700, s3_low_speed_limit=3,
        s3_low_speed_time=2, s3_open_deadline_ms=9000,
        s3_read_deadline_ms=60000, s3_list_max_keys=5000)))
    assert (o.connect_timeout_ms, o.low_speed_limit, o.low_speed_time,
            o.open_deadline_ms, o.read_deadline_ms, o.list_max_keys) == (
                700, 3, 2, 9000, 60000, 5000)
    # The library's bounds reach Python, named by it.
    with pytest.raises(ValueError) as e:
        ckptfs.open(ROOT, s3_endpoint="http://127.0.0.1:1",
                    s3_connect_timeout_ms=5)
    assert "S3 connect timeout 5 ms" in str(e.value)
    with pytest.raises(ValueError) as e:
        ckptfs.open(ROOT, s3_endpoint="http://127.0.0.1:1",
                    s3_read_deadline_ms=50)
    assert "S3 read deadline 50 ms" in str(e.value)


def test_the_library_gets_them(tmp_path):
    # An endpoint that refuses connections: the library's own line,
    # naming it, after no retry.
    with pytest.raises(ckptfs.Error) as e:
        ckptfs.load(ROOT, 2, 1, s3_endpoint="http://127.0.0.1:1",
                    s3_retries=0, s3_timeout_ms=2000,
                    s3_no_sign_request=True)
    assert "cannot reach http://127.0.0.1:1" in str(e.value)
    # A credentials file that an option names must be there.
    missing = tmp_path / "creds"
    with pytest.raises(ValueError) as e:
        ckptfs.open(ROOT, s3_endpoint="http://127.0.0.1:1",
                    s3_credentials_file=str(missing))
    assert f"{missing} (from the credentials_file option)" in str(e.value)
    # So must a CA bundle.
    with pytest.raises(ckptfs.Error) as e:
        ckptfs.open(ROOT, s3_endpoint="https://127.0.0.1:1",
                    s3_ca_bundle=str(missing), s3_no_sign_request=True)
    assert (f"S3 CA bundle from the ca_bundle option: {missing}: No such "
            "file or directory") in str(e.value)
    # The library's bounds, named by it.
    with pytest.raises(ValueError) as e:
        ckptfs.load(ROOT, 2, 1, s3_parallel=1000)
    assert "S3 parallel=1000: at most 256" in str(e.value)
    with pytest.raises(ValueError) as e:
        ckptfs.open(ROOT, s3_part_size=1 << 20, s3_merge_gap=1 << 20)
    assert "merge gap" in str(e.value)


def test_no_secret_in_messages(monkeypatch, tmp_path):
    secret = "Zq9SecretSecretSecret0123456789"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    with pytest.raises(ckptfs.Error) as e:
        ckptfs.load(ROOT, 2, 1, s3_endpoint="http://127.0.0.1:1",
                    s3_retries=0)
    assert secret not in str(e.value) and secret not in repr(e.value)


def test_no_credentials_is_an_error(monkeypatch, tmp_path):
    # Nothing anywhere: an error naming the sources tried, not unsigned
    # requests; s3_no_sign_request=True asks for those.
    for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE",
              "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
              "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
              "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("AWS_SHARED_CREDENTIALS_FILE", raising=False)
    monkeypatch.delenv("AWS_CONFIG_FILE", raising=False)
    with pytest.raises(ckptfs.Error) as e:
        ckptfs.open(ROOT, s3_endpoint="http://127.0.0.1:1", s3_retries=0)
    assert "no S3 credentials: tried" in str(e.value)
    assert "EC2 instance metadata" in str(e.value)
    with pytest.raises(ckptfs.Error) as e:
        ckptfs.open(ROOT, s3_endpoint="http://127.0.0.1:1", s3_retries=0,
                    s3_no_sign_request=True)
    assert "cannot reach http://127.0.0.1:1" in str(e.value)


def test_threads_default_for_s3():
    # An object store waits on the network: the library picks as many
    # readers as GETs may be in flight (threads 0), not the CPU share.
    assert _args.default_threads(b"s3://b/p") == 0
    assert _args.default_threads(os.fsencode("/tmp")) >= 1
