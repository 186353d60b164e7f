"""The Spider-like benchmark's five databases and the question templates asked of each.

Each domain is a schema, rows drawn from a seeded generator, and templates at Spider's four
levels of difficulty (``easy``: one table, one condition; ``medium``: grouping, ordering or an
aggregate with a condition; ``hard``: a join; ``extra``: a nested query, or a join with grouping
and ``HAVING``). A template's parameters come from the rows, so every gold query returns rows.
:mod:`sql_data` turns these into the shipped files.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Template:
    level: str
    question: str
    query: str
    params: Callable[[dict[str, list[Row]]], Sequence[dict[str, Any]]]
    """Values for the placeholders, read from the domain's rows (an empty dict: no placeholders)."""


@dataclass(frozen=True, slots=True)
class Domain:
    db_id: str
    ddl: str
    rows: dict[str, list[Row]]
    templates: list[Template]


FIRST = ["Ada", "Bruno", "Carla", "Dmitri", "Elif", "Femi", "Greta", "Hugo", "Ines", "Jonas", "Keiko", "Luis", "Mira",
         "Nils", "Olga", "Pavel", "Qing", "Rosa", "Sami", "Tove", "Umar", "Vera", "Wim", "Yara", "Zeno"]  # fmt: skip
LAST = ["Alvarez", "Berg", "Chen", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ivanova", "Jensen", "Kowalski",
        "Lind", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Sato", "Tanaka", "Weber"]  # fmt: skip
COUNTRIES = ["France", "Japan", "Brazil", "Canada", "Kenya", "Norway", "India", "Mexico"]
CITIES = ["Lyon", "Osaka", "Recife", "Calgary", "Nairobi", "Bergen", "Pune", "Puebla", "Porto", "Graz"]


def _names(rng: random.Random, count: int) -> list[str]:
    pool = [f"{first} {last}" for first in FIRST for last in LAST]
    return rng.sample(pool, count)


def _column(rows: list[Row], index: int) -> list[Any]:
    return sorted({row[index] for row in rows})


def _pick(values: Sequence[Any], key: str, count: int = 9) -> list[dict[str, Any]]:
    step = max(1, len(values) // count)
    return [{key: value} for value in list(values)[::step][:count]]


def school(rng: random.Random) -> Domain:
    departments = [(1, "Physics", "North Hall"), (2, "History", "Old Library"), (3, "Biology", "Lab Block"),
                   (4, "Economics", "North Hall"), (5, "Music", "Arts Centre")]  # fmt: skip
    students = [
        (i + 1, name, rng.randint(18, 29), rng.randint(1, 5), round(rng.uniform(2.0, 4.0), 1))
        for i, name in enumerate(_names(rng, 60))
    ]
    topics = ["Mechanics", "Optics", "Rome", "Empires", "Cells", "Ecology", "Markets", "Trade", "Harmony", "Rhythm"]
    courses = [(i + 1, title, i // 2 + 1, rng.choice([3, 4, 6])) for i, title in enumerate(topics)]
    enrollment = sorted(
        {(s[0], c, rng.choice("ABCDF")) for s in students for c in rng.sample(range(1, 11), 3)}, key=lambda r: r[:2]
    )
    rows = {"department": departments, "student": students, "course": courses, "enrollment": enrollment}
    ddl = """
CREATE TABLE department (dept_id INTEGER PRIMARY KEY, name TEXT, building TEXT);
CREATE TABLE student (student_id INTEGER PRIMARY KEY, name TEXT, age INTEGER, dept_id INTEGER REFERENCES department(dept_id), gpa REAL);
CREATE TABLE course (course_id INTEGER PRIMARY KEY, title TEXT, dept_id INTEGER REFERENCES department(dept_id), credits INTEGER);
CREATE TABLE enrollment (student_id INTEGER REFERENCES student(student_id), course_id INTEGER REFERENCES course(course_id), grade TEXT);
"""  # noqa: E501
    dept_names = [{"dept": d[1]} for d in departments]
    ages = _pick(_column(students, 2), "age")
    titles = _pick([c[1] for c in courses], "title", 10)
    templates = [
        Template("easy", "How many students are there?", "SELECT count(*) FROM student", lambda r: [{}]),
        Template("easy", "List the names of students older than {age}.",
                 "SELECT name FROM student WHERE age > {age}", lambda r: ages),
        Template("easy", "Which building is the {dept} department in?",
                 "SELECT building FROM department WHERE name = '{dept}'", lambda r: dept_names),
        Template("medium", "What is the average GPA of students aged {age}?",
                 "SELECT avg(gpa) FROM student WHERE age = {age}", lambda r: ages),
        Template("medium", "How many students does each department id have?",
                 "SELECT dept_id, count(*) FROM student GROUP BY dept_id", lambda r: [{}]),
        Template("medium", "List the names of the 3 students with the highest GPA.",
                 "SELECT name FROM student ORDER BY gpa DESC LIMIT 3", lambda r: [{}]),
        Template("hard", "How many students are in the {dept} department?",
                 "SELECT count(*) FROM student AS s JOIN department AS d ON s.dept_id = d.dept_id "
                 "WHERE d.name = '{dept}'", lambda r: dept_names),
        Template("hard", "What are the names of the students enrolled in the course {title}?",
                 "SELECT s.name FROM student AS s JOIN enrollment AS e ON s.student_id = e.student_id "
                 "JOIN course AS c ON e.course_id = c.course_id WHERE c.title = '{title}'", lambda r: titles),
        Template("hard", "Which courses does the {dept} department offer?",
                 "SELECT c.title FROM course AS c JOIN department AS d ON c.dept_id = d.dept_id "
                 "WHERE d.name = '{dept}'", lambda r: dept_names),
        Template("extra", "List the names of students whose GPA is above the average GPA of students aged {age}.",
                 "SELECT name FROM student WHERE gpa > (SELECT avg(gpa) FROM student WHERE age = {age})",
                 lambda r: ages[:4]),
        Template("extra", "Which department names have more than {n} students?",
                 "SELECT d.name FROM department AS d JOIN student AS s ON d.dept_id = s.dept_id "
                 "GROUP BY d.name HAVING count(*) > {n}", lambda r: [{"n": n} for n in (8, 10, 12, 14)]),
    ]  # fmt: skip
    return Domain("school", ddl, rows, templates)


def music(rng: random.Random) -> Domain:
    stadiums = [(i + 1, f"{city} Arena", city, rng.randint(5, 80) * 1000) for i, city in enumerate(CITIES)]
    singers = [(i + 1, name, rng.choice(COUNTRIES), rng.randint(19, 61)) for i, name in enumerate(_names(rng, 40))]
    themes = ["Spring", "Summer", "Winter", "Night", "River", "Harvest", "Lights", "Echo", "Dawn", "Storm", "Jazz",
              "Folk"]  # fmt: skip
    concerts = [
        (i + 1, f"{theme} Festival", rng.randint(2014, 2024), rng.randint(1, 10)) for i, theme in enumerate(themes)
    ]
    performs = sorted({(c[0], rng.randint(1, 40)) for c in concerts for _ in range(4)})
    rows = {"stadium": stadiums, "singer": singers, "concert": concerts, "singer_in_concert": performs}
    ddl = """
CREATE TABLE stadium (stadium_id INTEGER PRIMARY KEY, name TEXT, city TEXT, capacity INTEGER);
CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, name TEXT, year INTEGER, stadium_id INTEGER REFERENCES stadium(stadium_id));
CREATE TABLE singer_in_concert (concert_id INTEGER REFERENCES concert(concert_id), singer_id INTEGER REFERENCES singer(singer_id));
"""  # noqa: E501
    countries = _pick(_column(singers, 2), "country")
    years = _pick(_column(concerts, 2), "year")
    names = _pick([c[1] for c in concerts], "concert", 10)
    templates = [
        Template("easy", "How many singers are from {country}?",
                 "SELECT count(*) FROM singer WHERE country = '{country}'", lambda r: countries),
        Template("easy", "List the names of concerts held in {year}.",
                 "SELECT name FROM concert WHERE year = {year}", lambda r: years),
        Template("easy", "What is the largest stadium capacity?", "SELECT max(capacity) FROM stadium", lambda r: [{}]),
        Template("medium", "What is the average age of singers from {country}?",
                 "SELECT avg(age) FROM singer WHERE country = '{country}'", lambda r: countries),
        Template("medium", "How many singers come from each country?",
                 "SELECT country, count(*) FROM singer GROUP BY country", lambda r: [{}]),
        Template("medium", "Which country do the most singers come from?",
                 "SELECT country FROM singer GROUP BY country ORDER BY count(*) DESC LIMIT 1", lambda r: [{}]),
        Template("hard", "In which city was the concert {concert} held?",
                 "SELECT s.city FROM concert AS c JOIN stadium AS s ON c.stadium_id = s.stadium_id "
                 "WHERE c.name = '{concert}'", lambda r: names),
        Template("hard", "Which singers performed at the {concert}?",
                 "SELECT s.name FROM singer AS s JOIN singer_in_concert AS sc ON s.singer_id = sc.singer_id "
                 "JOIN concert AS c ON sc.concert_id = c.concert_id WHERE c.name = '{concert}'", lambda r: names),
        Template("extra", "List the names of stadiums that hosted no concert after {year}.",
                 "SELECT name FROM stadium WHERE stadium_id NOT IN "
                 "(SELECT stadium_id FROM concert WHERE year > {year})", lambda r: years[:4]),
        Template("extra", "Which stadium names hosted at least {n} concerts?",
                 "SELECT s.name FROM stadium AS s JOIN concert AS c ON s.stadium_id = c.stadium_id "
                 "GROUP BY s.name HAVING count(*) >= {n}", lambda r: [{"n": n} for n in (1, 2)]),
    ]  # fmt: skip
    return Domain("concert_singer", ddl, rows, templates)


def shop(rng: random.Random) -> Domain:
    customers = [(i + 1, name, rng.choice(CITIES)) for i, name in enumerate(_names(rng, 30))]
    catalogue = {
        "toys": ["Kite", "Puzzle", "Robot", "Yo-yo"],
        "kitchen": ["Kettle", "Whisk", "Teapot", "Pan"],
        "garden": ["Rake", "Hose", "Shovel", "Planter"],
        "office": ["Stapler", "Lamp", "Chair", "Desk"],
    }
    products = [
        (i + 1, name, category, rng.randint(3, 250))
        for i, (category, name) in enumerate((c, n) for c, names in catalogue.items() for n in names)
    ]
    orders = [
        (i + 1, rng.randint(1, 30), rng.randint(1, len(products)), rng.randint(1, 9), rng.randint(2019, 2024))
        for i in range(120)
    ]
    rows = {"customer": customers, "product": products, "orders": orders}
    ddl = """
CREATE TABLE customer (customer_id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE product (product_id INTEGER PRIMARY KEY, name TEXT, category TEXT, price INTEGER);
CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customer(customer_id), product_id INTEGER REFERENCES product(product_id), quantity INTEGER, year INTEGER);
"""  # noqa: E501
    categories = [{"category": c} for c in catalogue]
    cities = _pick(_column(customers, 2), "city")
    product_names = _pick([p[1] for p in products], "product", 10)
    years = [{"year": y} for y in range(2019, 2025)]
    templates = [
        Template("easy", "How many customers live in {city}?",
                 "SELECT count(*) FROM customer WHERE city = '{city}'", lambda r: cities),
        Template("easy", "List the names of products in the {category} category.",
                 "SELECT name FROM product WHERE category = '{category}'", lambda r: categories),
        Template("easy", "How many orders were placed in {year}?",
                 "SELECT count(*) FROM orders WHERE year = {year}", lambda r: years),
        Template("medium", "What is the average price of {category} products?",
                 "SELECT avg(price) FROM product WHERE category = '{category}'", lambda r: categories),
        Template("medium", "What is the name of the most expensive product?",
                 "SELECT name FROM product ORDER BY price DESC LIMIT 1", lambda r: [{}]),
        Template("medium", "How many units were ordered in each year?",
                 "SELECT year, sum(quantity) FROM orders GROUP BY year", lambda r: [{}]),
        Template("hard", "Which customers ordered the product {product}?",
                 "SELECT DISTINCT c.name FROM customer AS c JOIN orders AS o ON c.customer_id = o.customer_id "
                 "JOIN product AS p ON o.product_id = p.product_id WHERE p.name = '{product}'",
                 lambda r: product_names),
        Template("hard", "How many units of {category} products were ordered?",
                 "SELECT sum(o.quantity) FROM orders AS o JOIN product AS p ON o.product_id = p.product_id "
                 "WHERE p.category = '{category}'", lambda r: categories),
        Template("extra", "List the names of products that cost more than the average {category} product.",
                 "SELECT name FROM product WHERE price > (SELECT avg(price) FROM product "
                 "WHERE category = '{category}')", lambda r: categories),
        Template("extra", "Which customers placed more than {n} orders?",
                 "SELECT c.name FROM customer AS c JOIN orders AS o ON c.customer_id = o.customer_id "
                 "GROUP BY c.name HAVING count(*) > {n}", lambda r: [{"n": n} for n in (3, 4, 5, 6)]),
    ]  # fmt: skip
    return Domain("shop", ddl, rows, templates)


def flights(rng: random.Random) -> Domain:
    airlines = [(i + 1, f"{name} Air", country) for i, (name, country) in
                enumerate(zip(["Sky", "Blue", "Polar", "Sun", "Coast", "Delta"], COUNTRIES, strict=False))]  # fmt: skip
    codes = ["LYS", "KIX", "REC", "YYC", "NBO", "BGO", "PNQ", "PBC", "OPO", "GRZ"]
    airports = [
        (code, city, COUNTRIES[i % len(COUNTRIES)]) for i, (code, city) in enumerate(zip(codes, CITIES, strict=True))
    ]
    flight_rows: list[Row] = []
    for number in range(1, 81):
        origin, destination = rng.sample(codes, 2)
        flight_rows.append((f"F{100 + number}", rng.randint(1, 6), origin, destination, rng.randint(200, 9000)))
    rows = {"airline": airlines, "airport": airports, "flight": flight_rows}
    ddl = """
CREATE TABLE airline (airline_id INTEGER PRIMARY KEY, name TEXT, country TEXT);
CREATE TABLE airport (code TEXT PRIMARY KEY, city TEXT, country TEXT);
CREATE TABLE flight (flight_no TEXT PRIMARY KEY, airline_id INTEGER REFERENCES airline(airline_id), origin TEXT REFERENCES airport(code), destination TEXT REFERENCES airport(code), distance INTEGER);
"""  # noqa: E501
    origin_codes = _pick(codes, "code")
    cities = _pick(CITIES, "city")
    airline_names = [{"airline": a[1]} for a in airlines]
    templates = [
        Template("easy", "How many flights leave from {code}?",
                 "SELECT count(*) FROM flight WHERE origin = '{code}'", lambda r: origin_codes),
        Template("easy", "What is the code of the airport in {city}?",
                 "SELECT code FROM airport WHERE city = '{city}'", lambda r: cities),
        Template("easy", "What is the longest flight distance?", "SELECT max(distance) FROM flight", lambda r: [{}]),
        Template("medium", "What is the average distance of flights from {code}?",
                 "SELECT avg(distance) FROM flight WHERE origin = '{code}'", lambda r: origin_codes),
        Template("medium", "How many flights does each origin airport code have?",
                 "SELECT origin, count(*) FROM flight GROUP BY origin", lambda r: [{}]),
        Template("medium", "List the numbers of the 5 shortest flights.",
                 "SELECT flight_no FROM flight ORDER BY distance ASC LIMIT 5", lambda r: [{}]),
        Template("hard", "How many flights does {airline} operate?",
                 "SELECT count(*) FROM flight AS f JOIN airline AS a ON f.airline_id = a.airline_id "
                 "WHERE a.name = '{airline}'", lambda r: airline_names),
        Template("hard", "List the numbers of flights that leave from the airport in {city}.",
                 "SELECT f.flight_no FROM flight AS f JOIN airport AS p ON f.origin = p.code "
                 "WHERE p.city = '{city}'", lambda r: cities),
        Template("extra", "Which airlines fly more than {n} flights?",
                 "SELECT a.name FROM airline AS a JOIN flight AS f ON a.airline_id = f.airline_id "
                 "GROUP BY a.name HAVING count(*) > {n}", lambda r: [{"n": n} for n in (10, 12, 14, 16)]),
        Template("extra", "List the codes of airports that no flight of {airline} leaves from.",
                 "SELECT code FROM airport WHERE code NOT IN (SELECT f.origin FROM flight AS f "
                 "JOIN airline AS a ON f.airline_id = a.airline_id WHERE a.name = '{airline}')",
                 lambda r: airline_names[:4]),
    ]  # fmt: skip
    return Domain("flight_routes", ddl, rows, templates)


def library(rng: random.Random) -> Domain:
    authors = [(i + 1, name, rng.choice(COUNTRIES), rng.randint(1900, 1990)) for i, name in enumerate(_names(rng, 20))]
    words = ["Silent", "Golden", "Hidden", "Last", "Northern", "Paper", "Glass", "Winter"]
    nouns = ["Garden", "River", "House", "Letter", "Harbour", "Map", "Voyage", "Clock"]
    genres = ["novel", "poetry", "history", "science"]
    titles = rng.sample([f"The {w} {n}" for w in words for n in nouns], 50)
    books = [
        (i + 1, title, rng.randint(1, 20), rng.randint(1950, 2023), rng.randint(90, 800), rng.choice(genres))
        for i, title in enumerate(titles)
    ]
    loans = [(i + 1, rng.randint(1, 50), rng.choice(FIRST), rng.randint(2020, 2024)) for i in range(100)]
    rows = {"author": authors, "book": books, "loan": loans}
    ddl = """
CREATE TABLE author (author_id INTEGER PRIMARY KEY, name TEXT, nationality TEXT, birth_year INTEGER);
CREATE TABLE book (book_id INTEGER PRIMARY KEY, title TEXT, author_id INTEGER REFERENCES author(author_id), year INTEGER, pages INTEGER, genre TEXT);
CREATE TABLE loan (loan_id INTEGER PRIMARY KEY, book_id INTEGER REFERENCES book(book_id), member TEXT, year INTEGER);
"""  # noqa: E501
    genre_values = [{"genre": g} for g in genres]
    nationalities = _pick(_column(authors, 2), "nationality")
    book_titles = _pick(titles, "title", 10)
    author_names = _pick([a[1] for a in authors], "author", 9)
    templates = [
        Template("easy", "How many books are {genre} books?",
                 "SELECT count(*) FROM book WHERE genre = '{genre}'", lambda r: genre_values),
        Template("easy", "List the names of authors from {nationality}.",
                 "SELECT name FROM author WHERE nationality = '{nationality}'", lambda r: nationalities),
        Template("easy", "In which year was {title} published?",
                 "SELECT year FROM book WHERE title = '{title}'", lambda r: book_titles),
        Template("medium", "What is the average number of pages of {genre} books?",
                 "SELECT avg(pages) FROM book WHERE genre = '{genre}'", lambda r: genre_values),
        Template("medium", "How many books are there of each genre?",
                 "SELECT genre, count(*) FROM book GROUP BY genre", lambda r: [{}]),
        Template("medium", "What is the title of the longest book?",
                 "SELECT title FROM book ORDER BY pages DESC LIMIT 1", lambda r: [{}]),
        Template("hard", "Who wrote {title}?",
                 "SELECT a.name FROM author AS a JOIN book AS b ON a.author_id = b.author_id "
                 "WHERE b.title = '{title}'", lambda r: book_titles),
        Template("hard", "List the titles of the books written by {author}.",
                 "SELECT b.title FROM book AS b JOIN author AS a ON b.author_id = a.author_id "
                 "WHERE a.name = '{author}'", lambda r: author_names),
        Template("extra", "List the titles of books that were never borrowed after {year}.",
                 "SELECT title FROM book WHERE book_id NOT IN (SELECT book_id FROM loan WHERE year > {year})",
                 lambda r: [{"year": y} for y in (2020, 2021, 2022, 2023)]),
        Template("extra", "Which authors have written at least {n} books?",
                 "SELECT a.name FROM author AS a JOIN book AS b ON a.author_id = b.author_id "
                 "GROUP BY a.name HAVING count(*) >= {n}", lambda r: [{"n": n} for n in (3, 4, 5)]),
    ]  # fmt: skip
    return Domain("library", ddl, rows, templates)


DOMAINS: list[Callable[[random.Random], Domain]] = [school, music, shop, flights, library]
