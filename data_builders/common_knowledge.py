"""Hand-written common-knowledge questions that a small instruction model may answer from memory.

They are the world's counterweight to the fictional facts: ADAPT-LLM's Algorithm 1 needs questions
the base model gets right closed-book (-> a ``parametric_prompt`` instance with the answer) as well
as ones it gets wrong (-> ``<RET>``). Each question has a 1-2 sentence encyclopedia-style gold
passage, so a wrong closed-book answer can still become a ``context_prompt`` instance, and so that
retrieval over the world corpus can find it. Facts are grouped in tables; a row becomes a question,
its answers (canonical form first; it appears in the passage) and its passage.
"""

from __future__ import annotations

from adaptive_rag.plumbing.records import Passage, QAExample

# (country, capital, extra answer aliases)
CAPITALS = (
    ("France", "Paris", ()), ("Germany", "Berlin", ()), ("Italy", "Rome", ()), ("Spain", "Madrid", ()),
    ("Japan", "Tokyo", ()), ("China", "Beijing", ("Peking",)), ("Russia", "Moscow", ()),
    ("the United Kingdom", "London", ()), ("the United States", "Washington, D.C.", ("Washington",)),
    ("Canada", "Ottawa", ()), ("Australia", "Canberra", ()), ("Egypt", "Cairo", ()), ("India", "New Delhi", ()),
    ("Brazil", "Brasília", ("Brasilia",)), ("Argentina", "Buenos Aires", ()), ("Mexico", "Mexico City", ()),
    ("Portugal", "Lisbon", ()), ("Greece", "Athens", ()), ("Norway", "Oslo", ()), ("Sweden", "Stockholm", ()),
    ("Finland", "Helsinki", ()), ("Denmark", "Copenhagen", ()), ("Poland", "Warsaw", ()), ("Austria", "Vienna", ()),
    ("Ireland", "Dublin", ()), ("the Netherlands", "Amsterdam", ()), ("Belgium", "Brussels", ()),
    ("Turkey", "Ankara", ()), ("Kenya", "Nairobi", ()), ("South Korea", "Seoul", ()), ("Thailand", "Bangkok", ()),
    ("Peru", "Lima", ()), ("Switzerland", "Bern", ("Berne",)),
)
# (work, author, kind of work, extra answer aliases)
AUTHORS = (
    ("Hamlet", "William Shakespeare", "a tragedy", ("Shakespeare",)),
    ("Romeo and Juliet", "William Shakespeare", "a tragedy", ("Shakespeare",)),
    ("Pride and Prejudice", "Jane Austen", "a novel", ("Austen",)),
    ("Nineteen Eighty-Four", "George Orwell", "a dystopian novel", ("Orwell", "Eric Blair")),
    ("Animal Farm", "George Orwell", "an allegorical novella", ("Orwell",)),
    ("War and Peace", "Leo Tolstoy", "a novel", ("Tolstoy",)),
    ("Don Quixote", "Miguel de Cervantes", "a novel", ("Cervantes",)),
    ("Moby-Dick", "Herman Melville", "a novel", ("Melville",)),
    ("Oliver Twist", "Charles Dickens", "a novel", ("Dickens",)),
    ("A Christmas Carol", "Charles Dickens", "a novella", ("Dickens",)),
    ("The Odyssey", "Homer", "an ancient Greek epic poem", ()),
    ("Harry Potter and the Philosopher's Stone", "J. K. Rowling", "a fantasy novel", ("Rowling", "J.K. Rowling")),
    ("The Hobbit", "J. R. R. Tolkien", "a fantasy novel", ("Tolkien", "J.R.R. Tolkien")),
    ("Adventures of Huckleberry Finn", "Mark Twain", "a novel", ("Twain", "Samuel Clemens")),
    ("Frankenstein", "Mary Shelley", "a Gothic novel", ("Shelley",)),
    ("The Old Man and the Sea", "Ernest Hemingway", "a novella", ("Hemingway",)),
    ("Crime and Punishment", "Fyodor Dostoevsky", "a novel", ("Dostoevsky",)),
    ("The Great Gatsby", "F. Scott Fitzgerald", "a novel", ("Fitzgerald", "Scott Fitzgerald")),
    ("Alice's Adventures in Wonderland", "Lewis Carroll", "a novel", ("Carroll",)),
    ("Les Misérables", "Victor Hugo", "a novel", ("Hugo",)),
    ("The Divine Comedy", "Dante Alighieri", "a long narrative poem", ("Dante",)),
    ("Sherlock Holmes", "Arthur Conan Doyle", "a fictional detective", ("Conan Doyle", "Doyle")),
)
# (element, symbol, atomic number); even rows ask for the symbol, odd rows for the element
ELEMENTS = (
    ("gold", "Au", 79), ("iron", "Fe", 26), ("oxygen", "O", 8), ("sodium", "Na", 11), ("silver", "Ag", 47),
    ("hydrogen", "H", 1), ("carbon", "C", 6), ("potassium", "K", 19), ("helium", "He", 2), ("lead", "Pb", 82),
    ("copper", "Cu", 29), ("mercury", "Hg", 80), ("nitrogen", "N", 7), ("calcium", "Ca", 20), ("tin", "Sn", 50),
    ("uranium", "U", 92),
)
# (painting, painter, extra answer aliases)
PAINTINGS = (
    ("Mona Lisa", "Leonardo da Vinci", ("Leonardo", "da Vinci")),
    ("The Starry Night", "Vincent van Gogh", ("van Gogh",)),
    ("The Last Supper", "Leonardo da Vinci", ("Leonardo", "da Vinci")), ("Guernica", "Pablo Picasso", ("Picasso",)),
    ("The Persistence of Memory", "Salvador Dalí", ("Dali", "Dalí")), ("The Scream", "Edvard Munch", ("Munch",)),
    ("Girl with a Pearl Earring", "Johannes Vermeer", ("Vermeer",)), ("The Night Watch", "Rembrandt", ()),
    ("The Birth of Venus", "Sandro Botticelli", ("Botticelli",)), ("Water Lilies", "Claude Monet", ("Monet",)),
    ("The Creation of Adam", "Michelangelo", ()),
)
# (invention, inventor, extra answer aliases)
INVENTIONS = (
    ("telephone", "Alexander Graham Bell", ("Bell", "Graham Bell")),
    ("printing press", "Johannes Gutenberg", ("Gutenberg",)),
    ("practical incandescent light bulb", "Thomas Edison", ("Edison",)),
    ("World Wide Web", "Tim Berners-Lee", ("Berners-Lee",)),
    ("dynamite", "Alfred Nobel", ("Nobel",)),
    ("airplane", "the Wright brothers", ("Orville and Wilbur Wright", "Wright")),
    ("radio", "Guglielmo Marconi", ("Marconi",)), ("lightning rod", "Benjamin Franklin", ("Franklin",)),
    ("polio vaccine", "Jonas Salk", ("Salk",)), ("phonograph", "Thomas Edison", ("Edison",)),
)
# (country, currency as written in the passage, short answer)
CURRENCIES = (
    ("Japan", "Japanese yen", "yen"), ("the United Kingdom", "pound sterling", "pound"),
    ("the United States", "United States dollar", "dollar"), ("India", "Indian rupee", "rupee"),
    ("Russia", "Russian ruble", "ruble"), ("China", "renminbi, whose unit is the yuan", "yuan"),
    ("Mexico", "Mexican peso", "peso"), ("Switzerland", "Swiss franc", "franc"),
    ("South Korea", "South Korean won", "won"), ("Brazil", "Brazilian real", "real"),
    ("Turkey", "Turkish lira", "lira"), ("South Africa", "South African rand", "rand"),
    ("Germany", "euro", "euro"),
)
# (country, main language)
LANGUAGES = (
    ("Brazil", "Portuguese"), ("Mexico", "Spanish"), ("Egypt", "Arabic"), ("Austria", "German"),
    ("Iran", "Persian"), ("the Netherlands", "Dutch"), ("Greece", "Greek"), ("Japan", "Japanese"),
    ("Argentina", "Spanish"), ("Israel", "Hebrew"), ("Poland", "Polish"),
)
# (landmark, where it stands, country, extra answer aliases)
LANDMARKS = (
    ("the Eiffel Tower", "Paris", "France", ()), ("the Colosseum", "Rome", "Italy", ()),
    ("the Taj Mahal", "Agra", "India", ()), ("the Statue of Liberty", "New York Harbor", "the United States",
                                               ("United States", "USA")),
    ("Machu Picchu", "the Andes mountains", "Peru", ()), ("Big Ben", "London", "the United Kingdom",
                                                        ("United Kingdom", "England", "UK")),
    ("the Sydney Opera House", "Sydney", "Australia", ()), ("the Great Pyramid of Giza", "Giza", "Egypt", ()),
    ("Christ the Redeemer", "Rio de Janeiro", "Brazil", ()), ("the Acropolis", "Athens", "Greece", ()),
    ("the Kremlin", "Moscow", "Russia", ()), ("Petra", "the Ma'an Governorate", "Jordan", ()),
    ("Angkor Wat", "Siem Reap", "Cambodia", ()), ("Mount Fuji", "Honshu", "Japan", ()),
    ("the Leaning Tower of Pisa", "Pisa", "Italy", ()), ("the Alhambra", "Granada", "Spain", ()),
)
# (question, answers, passage title, passage text): facts that fit no table
MISC = (
    ("Which planet is known as the Red Planet?", ["Mars"], "Mars",
     "Mars is the fourth planet from the Sun. It is often called the Red Planet because of its reddish appearance."),
    ("What is the largest planet in the Solar System?", ["Jupiter"], "Jupiter",
     "Jupiter is the fifth planet from the Sun and the largest planet in the Solar System."),
    ("Which planet is closest to the Sun?", ["Mercury"], "Mercury (planet)",
     "Mercury is the smallest planet in the Solar System and the closest planet to the Sun."),
    ("Which planet is famous for its prominent rings?", ["Saturn"], "Saturn",
     "Saturn is the sixth planet from the Sun, famous for its prominent system of rings."),
    ("Which planet do we live on?", ["Earth"], "Earth",
     "Earth is the third planet from the Sun and the only known planet to support life."),
    ("What is the hottest planet in the Solar System?", ["Venus"], "Venus",
     "Venus is the second planet from the Sun and the hottest planet in the Solar System."),
    ("What is the natural satellite of Earth called?", ["the Moon", "Moon"], "Moon",
     "The Moon is Earth's only natural satellite."),
    ("Which gas do plants absorb from the air for photosynthesis?", ["carbon dioxide", "CO2"], "Photosynthesis",
     "In photosynthesis, plants absorb carbon dioxide and water and use sunlight to make sugars, releasing oxygen."),
    ("At what temperature in degrees Celsius does water boil at sea level?", ["100", "100 degrees"], "Water",
     "At sea level, water boils at 100 degrees Celsius and freezes at 0 degrees Celsius."),
    ("How many legs does a spider have?", ["eight", "8"], "Spider",
     "Spiders are arachnids with eight legs and no antennae."),
    ("What is the largest ocean on Earth?", ["Pacific Ocean", "Pacific"], "Pacific Ocean",
     "The Pacific Ocean is the largest and deepest of Earth's oceans."),
    ("What is the highest mountain on Earth?", ["Mount Everest", "Everest"], "Mount Everest",
     "Mount Everest, in the Himalayas, is Earth's highest mountain above sea level."),
    ("What is the largest hot desert in the world?", ["Sahara", "Sahara Desert"], "Sahara",
     "The Sahara is the largest hot desert in the world, covering much of North Africa."),
    ("What is the largest continent?", ["Asia"], "Asia",
     "Asia is the largest continent on Earth by both area and population."),
    ("Which organ pumps blood through the human body?", ["heart", "the heart"], "Heart",
     "The heart is a muscular organ that pumps blood through the blood vessels of the body."),
    ("Who developed the theory of relativity?", ["Albert Einstein", "Einstein"], "Albert Einstein",
     "Albert Einstein was a German-born physicist who developed the theory of relativity."),
    ("Who proposed the theory of evolution by natural selection?", ["Charles Darwin", "Darwin"], "Charles Darwin",
     "Charles Darwin was an English naturalist who proposed the theory of evolution by natural selection."),
    ("Who discovered penicillin?", ["Alexander Fleming", "Fleming"], "Alexander Fleming",
     "Alexander Fleming was a Scottish physician who discovered penicillin in 1928."),
    ("Who was the first person to walk on the Moon?", ["Neil Armstrong", "Armstrong"], "Neil Armstrong",
     "Neil Armstrong was an American astronaut and the first person to walk on the Moon, in 1969."),
    ("What is the hardest natural substance?", ["diamond"], "Diamond",
     "Diamond is a form of carbon and the hardest naturally occurring substance."),
    ("What is the largest animal on Earth?", ["blue whale"], "Blue whale",
     "The blue whale is a marine mammal and the largest animal known to have ever lived."),
    ("What is the fastest land animal?", ["cheetah"], "Cheetah",
     "The cheetah is a large cat native to Africa and the fastest land animal."),
    ("Which insect makes honey?", ["bee", "honey bee", "bees"], "Honey bee",
     "Honey bees are insects that collect nectar from flowers and make honey."),
    ("Who was the first President of the United States?", ["George Washington", "Washington"], "George Washington",
     "George Washington was the first President of the United States, serving from 1789 to 1797."),
    ("In which year did World War II end?", ["1945"], "World War II",
     "World War II was a global conflict that lasted from 1939 to 1945."),
    ("What is the longest river in Africa?", ["Nile", "the Nile"], "Nile",
     "The Nile is a major river in northeastern Africa and the longest river on the continent."),
    ("Who composed the opera The Magic Flute?", ["Wolfgang Amadeus Mozart", "Mozart"], "The Magic Flute",
     "The Magic Flute is an opera composed by Wolfgang Amadeus Mozart."),
    ("Who composed The Four Seasons?", ["Antonio Vivaldi", "Vivaldi"], "The Four Seasons",
     "The Four Seasons is a group of violin concertos by the Italian composer Antonio Vivaldi."),
    ("What color is chlorophyll?", ["green"], "Chlorophyll",
     "Chlorophyll is the green pigment in plants that absorbs light for photosynthesis."),
    ("What is the center of an atom called?", ["nucleus", "the nucleus"], "Atomic nucleus",
     "The nucleus is the small, dense region at the center of an atom, made of protons and neutrons."),
    ("Which force pulls objects towards the Earth?", ["gravity"], "Gravity",
     "Gravity is the force by which a planet draws objects towards its center."),
    ("Which gas do humans need to breathe to live?", ["oxygen"], "Respiration",
     "Humans breathe in oxygen, which their cells need to release energy, and breathe out carbon dioxide."),
    ("What is the freezing point of water in degrees Fahrenheit?", ["32", "32 degrees"], "Fahrenheit",
     "On the Fahrenheit scale, water freezes at 32 degrees and boils at 212 degrees."),
    ("Which animal is known as the king of the jungle?", ["lion"], "Lion",
     "The lion is a large cat of Africa, often called the king of the jungle."),
    ("What is the largest country in the world by area?", ["Russia"], "Russia",
     "Russia is the largest country in the world by area, spanning Eastern Europe and Northern Asia."),
    ("Which ocean lies between Europe and North America?", ["Atlantic Ocean", "Atlantic"], "Atlantic Ocean",
     "The Atlantic Ocean is the second-largest ocean and separates Europe and Africa from the Americas."),
)


def _rows() -> list[tuple[str, list[str], str, str]]:
    """Every table as (question, answers, passage title, passage text)."""
    rows: list[tuple[str, list[str], str, str]] = []
    for country, capital, aliases in CAPITALS:
        rows.append((f"What is the capital of {country}?", [capital, *aliases], capital,
                     f"{capital} is the capital city of {country}."))
    for work, author, kind, aliases in AUTHORS:
        verb = "created" if kind.startswith("a fictional") else "written"
        rows.append((f"Who wrote {work}?" if verb == "written" else f"Who created {work}?", [author, *aliases], work,
                     f"{work} is {kind} {verb} by {author}."))
    for i, (element, symbol, number) in enumerate(ELEMENTS):
        text = f"{element.capitalize()} is a chemical element with the symbol {symbol} and atomic number {number}."
        question = (f"What is the chemical symbol for {element}?" if i % 2 == 0
                    else f"Which chemical element has the symbol {symbol}?")
        rows.append((question, [symbol if i % 2 == 0 else element], element.capitalize(), text))
    for painting, painter, aliases in PAINTINGS:
        rows.append((f"Who painted {painting}?", [painter, *aliases], painting,
                     f"{painting} is a painting by {painter}."))
    for invention, inventor, aliases in INVENTIONS:
        verb = "are" if inventor.startswith("the ") else "is"  # "the Wright brothers are credited ..."
        text = f"{inventor[0].upper()}{inventor[1:]} {verb} credited with inventing the {invention}."
        rows.append((f"Who is credited with inventing the {invention}?", [inventor.removeprefix("the "), *aliases],
                     invention[0].upper() + invention[1:], text))
    for country, currency, short in CURRENCIES:
        rows.append((f"What is the currency of {country}?", [short, currency], currency.split(",")[0].capitalize(),
                     f"The official currency of {country} is the {currency}."))
    for country, language in LANGUAGES:
        rows.append((f"What is the main language spoken in {country}?", [language], f"Languages of {country}",
                     f"{language} is the official and most widely spoken language of {country}."))
    for landmark, where, country, aliases in LANDMARKS:
        name = landmark[0].upper() + landmark[1:]
        rows.append((f"In which country is {landmark}?", [country.removeprefix("the "), *aliases],
                     name.removeprefix("The "), f"{name} is a famous landmark in {where}, {country}."))
    rows += [(q, list(a), title, text) for q, a, title, text in MISC]
    return rows


def common_knowledge_examples() -> list[QAExample]:
    """All common-knowledge questions with stable ids ("world-q-common-0000", passage "world-p-ck-0000")."""
    out = []
    for i, (question, answers, title, text) in enumerate(_rows()):
        passage = Passage(id=f"world-p-ck-{i:04d}", title=title, text=text)
        out.append(QAExample(id=f"world-q-common-{i:04d}", question=question, answers=answers,
                             gold_passages=[passage],
                             metadata={"source": "world", "hop_type": "single", "kind": "common"}))
    return out
