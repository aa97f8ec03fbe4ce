"""(routes: to be written)"""

from fastapi import APIRouter

router = APIRouter()
public_router = APIRouter()
