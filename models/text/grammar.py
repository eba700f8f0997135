"""A tiny English -> French grammar for the `grammar` translation task.

Sentences have the shape  subject  verb  object, for example
"the small cat eats the red apple" -> "le petit chat mange la pomme rouge".

The point of the task is agreement, which a model has to learn from data:
French articles and adjectives agree with the noun's gender and number,
the verb agrees with the subject's number, and most adjectives move from
before the noun (English) to after it (French).

To keep the rules small and exactly right, the vocabulary avoids French nouns
that start with a vowel or "h" (no l' elision, no bel/vieil/nouvel forms) and
every irregular plural is spelled out in the tables below.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

MASC, FEM = "m", "f"


@dataclass(frozen=True)
class Noun:
    en: str
    en_plural: str
    fr: str
    fr_plural: str
    gender: str  # MASC or FEM


@dataclass(frozen=True)
class Adjective:
    en: str
    fr_forms: tuple[str, str, str, str]  # masc sg, fem sg, masc pl, fem pl
    before_noun: bool  # French placement; English adjectives always precede

    def fr(self, gender: str, plural: bool) -> str:
        """The French form agreeing with a noun of this gender and number."""
        return self.fr_forms[(gender == FEM) + 2 * plural]


@dataclass(frozen=True)
class Verb:
    en_singular: str  # may be several words, e.g. "looks for"
    en_plural: str
    fr_singular: str
    fr_plural: str


# Subjects are people and animals so that sentences stay sensible ("the cat
# eats the apple", never "the apple eats the cat"); objects may be any noun.
#            English     plural       French     plural      gender
_ANIMATE = [
    ("cat",     "cats",     "chat",    "chats",    MASC),
    ("dog",     "dogs",     "chien",   "chiens",   MASC),
    ("boy",     "boys",     "garçon",  "garçons",  MASC),
    ("horse",   "horses",   "cheval",  "chevaux",  MASC),
    ("rabbit",  "rabbits",  "lapin",   "lapins",   MASC),
    ("wolf",    "wolves",   "loup",    "loups",    MASC),
    ("fox",     "foxes",    "renard",  "renards",  MASC),
    ("pig",     "pigs",     "cochon",  "cochons",  MASC),
    ("monkey",  "monkeys",  "singe",   "singes",   MASC),
    ("duck",    "ducks",    "canard",  "canards",  MASC),
    ("brother", "brothers", "frère",   "frères",   MASC),
    ("father",  "fathers",  "père",    "pères",    MASC),
    ("king",    "kings",    "roi",     "rois",     MASC),
    ("girl",    "girls",    "fille",   "filles",   FEM),
    ("woman",   "women",    "femme",   "femmes",   FEM),
    ("mother",  "mothers",  "mère",    "mères",    FEM),
    ("sister",  "sisters",  "sœur",    "sœurs",    FEM),
    ("queen",   "queens",   "reine",   "reines",   FEM),
    ("cow",     "cows",     "vache",   "vaches",   FEM),
    ("mouse",   "mice",     "souris",  "souris",   FEM),
    ("hen",     "hens",     "poule",   "poules",   FEM),
    ("goat",    "goats",    "chèvre",  "chèvres",  FEM),
    ("turtle",  "turtles",  "tortue",  "tortues",  FEM),
]
_INANIMATE = [
    ("book",      "books",      "livre",    "livres",    MASC),
    ("cake",      "cakes",      "gâteau",   "gâteaux",   MASC),
    ("boat",      "boats",      "bateau",   "bateaux",   MASC),
    ("hat",       "hats",       "chapeau",  "chapeaux",  MASC),
    ("newspaper", "newspapers", "journal",  "journaux",  MASC),
    ("ball",      "balls",      "ballon",   "ballons",   MASC),
    ("pen",       "pens",       "stylo",    "stylos",    MASC),
    ("bike",      "bikes",      "vélo",     "vélos",     MASC),
    ("knife",     "knives",     "couteau",  "couteaux",  MASC),
    ("coat",      "coats",      "manteau",  "manteaux",  MASC),
    ("bag",       "bags",       "sac",      "sacs",      MASC),
    ("apple",     "apples",     "pomme",    "pommes",    FEM),
    ("house",     "houses",     "maison",   "maisons",   FEM),
    ("car",       "cars",       "voiture",  "voitures",  FEM),
    ("table",     "tables",     "table",    "tables",    FEM),
    ("chair",     "chairs",     "chaise",   "chaises",   FEM),
    ("letter",    "letters",    "lettre",   "lettres",   FEM),
    ("dress",     "dresses",    "robe",     "robes",     FEM),
    ("flower",    "flowers",    "fleur",    "fleurs",    FEM),
    ("window",    "windows",    "fenêtre",  "fenêtres",  FEM),
    ("shirt",     "shirts",     "chemise",  "chemises",  FEM),
    ("cup",       "cups",       "tasse",    "tasses",    FEM),
    ("key",       "keys",       "clé",      "clés",      FEM),
    ("box",       "boxes",      "boîte",    "boîtes",    FEM),
]

#   English      masc sg    fem sg       masc pl     fem pl       before noun?
_ADJECTIVES = [
    ("small",     "petit",   "petite",   "petits",   "petites",   True),
    ("big",       "grand",   "grande",   "grands",   "grandes",   True),
    ("good",      "bon",     "bonne",    "bons",     "bonnes",    True),
    ("beautiful", "beau",    "belle",    "beaux",    "belles",    True),
    ("pretty",    "joli",    "jolie",    "jolis",    "jolies",    True),
    ("young",     "jeune",   "jeune",    "jeunes",   "jeunes",    True),
    ("old",       "vieux",   "vieille",  "vieux",    "vieilles",  True),
    ("new",       "nouveau", "nouvelle", "nouveaux", "nouvelles", True),
    ("bad",       "mauvais", "mauvaise", "mauvais",  "mauvaises", True),
    ("red",       "rouge",   "rouge",    "rouges",   "rouges",    False),
    ("black",     "noir",    "noire",    "noirs",    "noires",    False),
    ("white",     "blanc",   "blanche",  "blancs",   "blanches",  False),
    ("green",     "vert",    "verte",    "verts",    "vertes",    False),
    ("blue",      "bleu",    "bleue",    "bleus",    "bleues",    False),
    ("grey",      "gris",    "grise",    "gris",     "grises",    False),
    ("yellow",    "jaune",   "jaune",    "jaunes",   "jaunes",    False),
    ("happy",     "heureux", "heureuse", "heureux",  "heureuses", False),
    ("tired",     "fatigué", "fatiguée", "fatigués", "fatiguées", False),
    ("heavy",     "lourd",   "lourde",   "lourds",   "lourdes",   False),
    ("dirty",     "sale",    "sale",     "sales",    "sales",     False),
    ("round",     "rond",    "ronde",    "ronds",    "rondes",    False),
]

#   English sg      English pl    French sg   French pl
_VERBS = [
    ("eats",       "eat",       "mange",    "mangent"),
    ("sees",       "see",       "voit",     "voient"),
    ("loves",      "love",      "aime",     "aiment"),
    ("looks for",  "look for",  "cherche",  "cherchent"),
    ("takes",      "take",      "prend",    "prennent"),
    ("watches",    "watch",     "regarde",  "regardent"),
    ("carries",    "carry",     "porte",    "portent"),
    ("finds",      "find",      "trouve",   "trouvent"),
    ("buys",       "buy",       "achète",   "achètent"),
    ("washes",     "wash",      "lave",     "lavent"),
    ("wants",      "want",      "veut",     "veulent"),
    ("draws",      "draw",      "dessine",  "dessinent"),
    ("holds",      "hold",      "tient",    "tiennent"),
    ("pushes",     "push",      "pousse",   "poussent"),
    ("follows",    "follow",    "suit",     "suivent"),
    ("sells",      "sell",      "vend",     "vendent"),
]

ANIMATE_NOUNS = [Noun(*row) for row in _ANIMATE]
NOUNS = ANIMATE_NOUNS + [Noun(*row) for row in _INANIMATE]
ADJECTIVES = [Adjective(en, (ms, fs, mp, fp), before) for en, ms, fs, mp, fp, before in _ADJECTIVES]
VERBS = [Verb(*row) for row in _VERBS]

# Look-ups by the English base word ("cat", "small", "eat"), handy in tests.
NOUN_BY_EN = {noun.en: noun for noun in NOUNS}
ADJECTIVE_BY_EN = {adj.en: adj for adj in ADJECTIVES}
VERB_BY_EN = {verb.en_plural: verb for verb in VERBS}


@dataclass(frozen=True)
class NounPhrase:
    noun: Noun
    plural: bool
    definite: bool  # "the" vs "a"/"some"
    adjective: Adjective | None = None

    def english(self) -> list[str]:
        words = [self.noun.en_plural if self.plural else self.noun.en]
        if self.adjective is not None:
            words.insert(0, self.adjective.en)
        return [self._english_article(words[0])] + words

    def _english_article(self, next_word: str) -> str:
        if self.definite:
            return "the"
        if self.plural:
            return "some"
        # "an" before a vowel sound; the vocabulary has no words where the
        # spelling misleads ("hour", "unicorn"), so the first letter decides.
        return "an" if next_word[0] in "aeiou" else "a"

    def french(self) -> list[str]:
        gender = self.noun.gender
        words = [self.noun.fr_plural if self.plural else self.noun.fr]
        if self.adjective is not None:
            form = self.adjective.fr(gender, self.plural)
            if self.adjective.before_noun:
                words.insert(0, form)
            else:
                words.append(form)
        return [self._french_article()] + words

    def _french_article(self) -> str:
        if self.plural:
            if self.definite:
                return "les"
            # Written French turns "des" into "de" before a plural adjective
            # that precedes the noun: "de petits chats", but "des chats noirs".
            before = self.adjective is not None and self.adjective.before_noun
            return "de" if before else "des"
        if self.noun.gender == FEM:
            return "la" if self.definite else "une"
        return "le" if self.definite else "un"


@dataclass(frozen=True)
class Sentence:
    subject: NounPhrase
    verb: Verb
    obj: NounPhrase

    def english(self) -> str:
        verb = self.verb.en_plural if self.subject.plural else self.verb.en_singular
        return " ".join(self.subject.english() + [verb] + self.obj.english())

    def french(self) -> str:
        verb = self.verb.fr_plural if self.subject.plural else self.verb.fr_singular
        return " ".join(self.subject.french() + [verb] + self.obj.french())


def random_noun_phrase(rng: random.Random, nouns: list[Noun]) -> NounPhrase:
    """Half of the phrases get an adjective, so bare and modified nouns both occur."""
    adjective = rng.choice(ADJECTIVES) if rng.random() < 0.5 else None
    return NounPhrase(rng.choice(nouns), plural=rng.random() < 0.5,
                      definite=rng.random() < 0.5, adjective=adjective)


def random_sentence(rng: random.Random) -> Sentence:
    return Sentence(random_noun_phrase(rng, ANIMATE_NOUNS), rng.choice(VERBS),
                    random_noun_phrase(rng, NOUNS))


def sample_pair(rng: random.Random) -> tuple[str, str]:
    """One (English, French) sentence pair."""
    sentence = random_sentence(rng)
    return sentence.english(), sentence.french()
