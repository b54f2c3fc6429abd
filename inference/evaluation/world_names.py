"""The generated world's words: people's names, aliases and the small talk around a message.

Every draw from these tuples goes through the world's seeded generator (:mod:`.world`), so
their order is part of a world's byte-for-byte reproducibility: append, never reorder.
"""

from __future__ import annotations

import re

FIRST_NAMES = (
    "Maya Sam Ava Noah Lena Omar Iris Theo Zara Felix Nina Hugo Ruth Ezra Mila Leo Ada Kai Nora Ivan "
    "Lila Jude Cleo Arlo Vera Milo Rosa Otto Yara Finn Elsa Remy Dina Nico Greta Tariq Hana Luca Ines "
    "Bram Sofia Emil Alma Jonas Kira Pablo Mina Ravi Tess Anton Lucia Idris Maren Tomas Selma Aaron "
    "Priya Dev Lior Chloe Mateo Asha Bruno Freya Malik Elin Yusuf Carla Oskar Leyla Santi Ilse Jamal "
    "Nadia Rui Saga Kofi Amara Viktor Juno Reza Bea Caspar Fatima Hamid Liv Marco Noor Pia Quinn Rafael "
    "Sana Taro Uma Wren Xavier Yuki Zeke Anouk Boris Celia Dario Esme Farid Gia Hector Ida Joel Kaia "
    "Lars Maud Nils Ona Pavel Rhea Silas Tove Ugo Vida Wim"
).split()
LAST_NAMES = (
    "Kim Patel Garcia Novak Silva Jensen Okafor Rossi Tanaka Larsen Haddad Moreau Costa Weber Kowalski "
    "Nguyen Ahmed Berg Fischer Lopez Mendes Ivanova Park Sato Dubois Romano Keller Horvat Nakamura "
    "Andersen Cohen Popescu Yilmaz Murphy Schmidt Bianchi Eriksen Varga Reyes Hoffman Lindqvist Mbeki "
    "Aziz Castro Duarte Fontaine Grant Hale Ito Jovanovic Kaur Lam Marsh Nolan Ortiz Petrov Quist "
    "Rahman Soto Tran Ueda Vance Wolfe Young Zhou"
).split()
#: Unique aliases for the first few people, as the user would call them.
ALIASES = ("my sister", "my partner", "my brother", "my boss", "my neighbour", "my best friend")

OPENERS = ("", "btw ", "fyi ", "Quick update: ", "Heard that ", "Just so you know, ", "Funny thing, ",
            "Reminder: ", "Apparently ", "So, ", "Oh and ")
CLOSERS = ("", " now", " these days", ", I think", ", last I heard", " for sure", ", apparently",
            " :)", " (pretty sure)", ", as far as I know")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
NORMAL = re.compile(r"[^0-9a-z]+")


def text_key(text: str) -> str:
    """A stricter normalisation than the store's: texts unequal here are never one evidence unit."""
    return NORMAL.sub(" ", text.lower()).strip()
