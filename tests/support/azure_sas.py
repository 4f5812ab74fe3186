"""SAS tokens for Azurite containers, and the forms their secret part (the signature) can be shown in.

A token comes from ``azure.storage.blob.generate_container_sas`` signed with Azurite's well-known key.
Its expiry is fixed, so the same container always gets the same token: a test can name the signature
it handed out after the fact.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote, unquote

from azure.storage.blob import ContainerSasPermissions, generate_container_sas
from support.azure_server import ACCOUNT, KEY, AzureContainer

SAS_EXPIRY = datetime(2099, 1, 1, tzinfo=UTC)


def container_sas(container: AzureContainer, *, write: bool = False) -> str:
    """A SAS token (``se=...&sp=...&sv=...&sr=c&sig=...``) for the container; read and list, or all."""
    return generate_container_sas(
        ACCOUNT,
        container.name,
        account_key=KEY,
        permission=ContainerSasPermissions(read=True, list=True, write=write, create=write, delete=write),
        expiry=SAS_EXPIRY,
    )


def signature_of(sas: str) -> str:
    """The ``sig`` of a SAS token as the token carries it (percent-encoded, perhaps only in part)."""
    return next(pair[len("sig=") :] for pair in sas.split("&") if pair.startswith("sig="))


def signature_forms(sas: str) -> tuple[str, str, str]:
    """Every form a log or message might show the signature in: as carried, decoded, fully encoded."""
    carried = signature_of(sas)
    return carried, unquote(carried), quote(unquote(carried), safe="")


def with_wrong_signature(sas: str) -> str:
    """``sas`` with a well-formed signature that does not match (Azure answers 403)."""
    return "&".join(
        "sig=WRONG" + pair[len("sig=WRONG") :] if pair.startswith("sig=") else pair for pair in sas.split("&")
    )
