"""The structured requests ``bench.structured_output`` sends: JSON of a schema (as the openai SDK's ``parse`` and
LangChain's ``with_structured_output`` send it: every property required, no other), any JSON object, and calls
under ``tool_choice`` required and named — each a subject an app would ask about.

``structured_requests(n)`` gives ``n`` of them, the kinds in turn (half JSON of a schema, a sixth each of the
others), the subjects in turn within each kind; the same ``n`` gives the same requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from connectors import Message, Tool


def strict(properties: dict[str, Any]) -> dict[str, Any]:
    """An object schema whose every property is required and nothing else allowed (OpenAI's strict schemas)."""
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


TEXT, INT, NUM, BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
TEXTS = {"type": "array", "items": TEXT}

SCHEMAS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "city_card": (strict({"name": TEXT, "country": TEXT, "population": INT}),
                  ("Zürich", "Lagos", "Osaka", "Lima", "Tromsø")),
    "person": (strict({"name": TEXT, "age": INT, "email": TEXT}),
               ("Ada Lovelace", "a new colleague called Sam", "the author of Dune", "Marie Curie", "a fictional pilot")),
    "product": (strict({"name": TEXT, "price": NUM, "in_stock": BOOL}),
                ("a blue kettle", "running shoes", "a 4K monitor", "a box of green tea", "a folding bicycle")),
    "event": (strict({"title": TEXT, "date": TEXT, "attendees": INT}),
              ("a team offsite in May", "a wedding", "a product launch", "a chess tournament", "a book club meeting")),
    "book": (strict({"title": TEXT, "author": TEXT, "year": INT}),
             ("Moby-Dick", "a famous Russian novel", "the first Harry Potter", "Don Quixote", "a book about Mars")),
    "weather": (strict({"city": TEXT, "temperature": NUM, "unit": {"type": "string", "enum": ["C", "F"]}}),
                ("Reykjavik in winter", "Cairo at noon", "Oslo today", "Singapore", "Denver in spring")),
    "recipe": (strict({"dish": TEXT, "ingredients": TEXTS, "minutes": INT}),
               ("pancakes", "a tomato soup", "guacamole", "fried rice", "a fruit salad")),
    "movie": (strict({"title": TEXT, "year": INT, "genres": TEXTS}),
              ("Casablanca", "a recent animated film", "Alien", "a comedy from the nineties", "Spirited Away")),
    "task": (strict({"title": TEXT, "done": BOOL, "priority": {"type": "string", "enum": ["low", "medium", "high"]}}),
             ("renew the passport", "water the plants", "file the taxes", "fix the login bug", "call the plumber")),
    "order": (strict({"order_id": TEXT, "items": {"type": "array", "items": strict({"sku": TEXT, "qty": INT})},
                      "total": NUM}),
              ("two coffees and a croissant", "a laptop and a mouse", "ten pencils", "a sofa", "three pizzas")),
}  # fmt: skip
"""Each schema and the subjects asked about under it (``"The <schema> of <subject>, please."``)."""


def tool(name: str, description: str, **properties: Any) -> Tool:
    required = [k for k in properties if k not in ("unit", "cc", "limit")]
    return Tool(name, description, {"type": "object", "properties": properties, "required": required})


TOOLS = [
    tool("get_weather", "The current weather of a city.", city=TEXT, unit={"type": "string", "enum": ["C", "F"]}),
    tool("get_time", "The local time in a city.", city=TEXT),
    tool("convert_currency", "Convert an amount between currencies.", amount=NUM, source=TEXT, target=TEXT),
    tool("send_email", "Send an email.", to=TEXT, subject=TEXT, body=TEXT, cc=TEXTS),
    tool(
        "search_flights",
        "Find flights between two cities on a date.",
        origin=TEXT,
        destination=TEXT,
        date=TEXT,
        limit=INT,
    ),  # fmt: skip
]
CALL_ASKS = (
    ("What's the weather in Zürich right now?", "get_weather"),
    ("What time is it in Tokyo?", "get_time"),
    ("How much is 120 euros in US dollars?", "convert_currency"),
    ("Email Maria that the meeting moves to Friday.", "send_email"),
    ("Find me a flight from Lisbon to Berlin on 3 March.", "search_flights"),
)
"""Requests that call for a tool, and the tool a named ``tool_choice`` names."""

KINDS = ("json_schema", "json_object", "json_schema", "required", "json_schema", "named")
"""The kinds in turn: half JSON of a schema, a sixth each of any JSON object, a required call, a named one."""


@dataclass(frozen=True)
class StructuredRequest:
    """One request as ``Deployment.answer`` takes it: the conversation, ``response_format`` or tools, the kind."""

    kind: str
    subject: str
    messages: tuple[Message, ...]
    response_format: dict[str, Any] | None = None
    tools: tuple[Tool, ...] = ()
    schema: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def params(self) -> dict[str, Any]:
        return {"tool_choice": "required"} if self.tools else {}


def structured_requests(n: int) -> list[StructuredRequest]:
    """``n`` requests, the kinds in turn (``KINDS``) and the subjects in turn within each kind."""
    subjects = [(name, schema, s) for name, (schema, asks) in SCHEMAS.items() for s in asks]
    subjects = [subjects[(i * 7) % len(subjects)] for i in range(len(subjects))]  # schemas interleaved
    seen = {kind: 0 for kind in set(KINDS)}
    out = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        k, seen[kind] = seen[kind], seen[kind] + 1
        out.append(request(kind, k, subjects))
    return out


def request(kind: str, k: int, subjects: list[tuple[str, dict[str, Any], str]]) -> StructuredRequest:
    """The ``k``-th request of ``kind``."""
    if kind in ("required", "named"):
        ask, named = CALL_ASKS[k % len(CALL_ASKS)]
        tools = tuple(t for t in TOOLS if t.name == named) if kind == "named" else tuple(TOOLS)
        return StructuredRequest(kind, ask, (Message("user", ask),), tools=tools)
    name, schema, subject = subjects[k % len(subjects)]
    ask = f"The {name.replace('_', ' ')} of {subject}, please."
    if kind == "json_object":
        return StructuredRequest(kind, subject, (Message("user", ask),), {"type": "json_object"})
    fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    return StructuredRequest(kind, subject, (Message("user", ask),), fmt, schema=schema)


__all__ = ["CALL_ASKS", "KINDS", "SCHEMAS", "TOOLS", "StructuredRequest", "request", "structured_requests", "strict"]
