-- A Pagila-like schema written for syncd's tests: the 15 tables of the
-- DVD-rental sample, each with last_update and a primary key named like
-- actor_id (composite for film_actor and film_category), payment
-- partitioned by payment_date. Every last_update is one of a few values,
-- so rows tie on it as in the real sample. No real data: a few hundred
-- generated rows per table.
CREATE TYPE mpaa_rating AS ENUM ('G', 'PG', 'PG-13', 'R', 'NC-17');

CREATE TABLE actor (actor_id int PRIMARY KEY, first_name text NOT NULL, last_name text NOT NULL, last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE category (category_id int PRIMARY KEY, name text NOT NULL, last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE language (language_id int PRIMARY KEY, name character(20) NOT NULL, last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE country (country_id int PRIMARY KEY, country text NOT NULL, last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE city (city_id int PRIMARY KEY, city text NOT NULL, country_id int NOT NULL REFERENCES country, last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE address (address_id int PRIMARY KEY, address text NOT NULL, address2 text, district text NOT NULL, city_id int NOT NULL REFERENCES city, postal_code text, phone text NOT NULL, last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE film (film_id int PRIMARY KEY, title text NOT NULL, description text, release_year int, language_id int NOT NULL REFERENCES language, rental_duration smallint NOT NULL DEFAULT 3, rental_rate numeric(4,2) NOT NULL DEFAULT 4.99, length smallint, replacement_cost numeric(5,2) NOT NULL DEFAULT 19.99, rating mpaa_rating DEFAULT 'G', special_features text[], last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE film_actor (actor_id int NOT NULL REFERENCES actor, film_id int NOT NULL REFERENCES film, last_update timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (actor_id, film_id));
CREATE TABLE film_category (film_id int NOT NULL REFERENCES film, category_id int NOT NULL REFERENCES category, last_update timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (film_id, category_id));
CREATE TABLE store (store_id int PRIMARY KEY, manager_staff_id int NOT NULL, address_id int NOT NULL REFERENCES address, last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE staff (staff_id int PRIMARY KEY, first_name text NOT NULL, last_name text NOT NULL, address_id int NOT NULL REFERENCES address, email text, store_id int NOT NULL REFERENCES store, active boolean NOT NULL DEFAULT true, username text NOT NULL, password text, picture bytea, last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE customer (customer_id int PRIMARY KEY, store_id int NOT NULL REFERENCES store, first_name text NOT NULL, last_name text NOT NULL, email text, address_id int NOT NULL REFERENCES address, activebool boolean NOT NULL DEFAULT true, create_date date NOT NULL DEFAULT current_date, active int, last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE inventory (inventory_id int PRIMARY KEY, film_id int NOT NULL REFERENCES film, store_id int NOT NULL REFERENCES store, last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE rental (rental_id int PRIMARY KEY, rental_date timestamptz NOT NULL, inventory_id int NOT NULL REFERENCES inventory, customer_id int NOT NULL REFERENCES customer, return_date timestamptz, staff_id int NOT NULL REFERENCES staff, last_update timestamptz NOT NULL DEFAULT now());
CREATE TABLE payment (payment_id int NOT NULL, customer_id int NOT NULL, staff_id int NOT NULL, rental_id int NOT NULL, amount numeric(5,2) NOT NULL, payment_date timestamptz NOT NULL, last_update timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (payment_date, payment_id)) PARTITION BY RANGE (payment_date);
CREATE TABLE payment_p2022_01 PARTITION OF payment FOR VALUES FROM ('2022-01-01 00:00:00+00') TO ('2022-02-01 00:00:00+00');
CREATE TABLE payment_p2022_02 PARTITION OF payment FOR VALUES FROM ('2022-02-01 00:00:00+00') TO ('2022-03-01 00:00:00+00');
CREATE TABLE payment_p2022_03 PARTITION OF payment FOR VALUES FROM ('2022-03-01 00:00:00+00') TO ('2022-04-01 00:00:00+00');

-- A few distinct last_update values, so that many rows tie on each.
CREATE FUNCTION pagila_ts(g int) RETURNS timestamptz LANGUAGE sql IMMUTABLE
  AS $$ SELECT '2022-02-15 09:45:00+00'::timestamptz + (g % 3) * interval '1 minute' $$;

INSERT INTO actor SELECT g, 'First' || g, 'Last' || g, pagila_ts(g) FROM generate_series(1, 200) g;
INSERT INTO category SELECT g, 'Category ' || g, pagila_ts(g) FROM generate_series(1, 16) g;
INSERT INTO language SELECT g, 'Language ' || g, pagila_ts(g) FROM generate_series(1, 6) g;
INSERT INTO country SELECT g, 'Country ' || g, pagila_ts(g) FROM generate_series(1, 109) g;
INSERT INTO city SELECT g, 'City ' || g, 1 + g % 109, pagila_ts(g) FROM generate_series(1, 600) g;
INSERT INTO address SELECT g, g || ' Main Street', NULLIF('', ''), 'District ' || (g % 40), 1 + g % 600, lpad(g::text, 5, '0'), '555-' || g, pagila_ts(g) FROM generate_series(1, 603) g;
INSERT INTO film SELECT g, 'Film ' || g, 'A story of ' || g, 2006, 1 + g % 6, 3 + g % 5, 0.99 + (g % 3) * 2, 46 + g % 140, 9.99 + g % 21,
  (ARRAY['G','PG','PG-13','R','NC-17'])[1 + g % 5]::mpaa_rating, ARRAY['Trailers', 'Commentaries'], pagila_ts(g) FROM generate_series(1, 500) g;
INSERT INTO film_actor SELECT 1 + (g % 200), 1 + (g / 2) % 500, pagila_ts(g) FROM generate_series(0, 999) g ON CONFLICT DO NOTHING;
INSERT INTO film_category SELECT g, 1 + g % 16, pagila_ts(g) FROM generate_series(1, 500) g;
INSERT INTO store VALUES (1, 1, 1, pagila_ts(1)), (2, 2, 2, pagila_ts(2));
INSERT INTO staff VALUES (1, 'Mike', 'Hillyer', 3, 'mike@example.org', 1, true, 'Mike', 'x', '\x89504e47', pagila_ts(1)),
  (2, 'Jon', 'Stephens', 4, 'jon@example.org', 2, true, 'Jon', NULL, NULL, pagila_ts(2));
INSERT INTO customer SELECT g, 1 + g % 2, 'First' || g, 'Last' || g, 'c' || g || '@example.org', 5 + g % 598, true, '2022-02-14', 1, pagila_ts(g) FROM generate_series(1, 599) g;
INSERT INTO inventory SELECT g, 1 + g % 500, 1 + g % 2, pagila_ts(g) FROM generate_series(1, 800) g;
INSERT INTO rental SELECT g, '2022-01-01 00:00:00+00'::timestamptz + g * interval '1 hour', 1 + g % 800, 1 + g % 599,
  CASE WHEN g % 10 = 0 THEN NULL ELSE '2022-01-03 00:00:00+00'::timestamptz + g * interval '1 hour' END, 1 + g % 2, pagila_ts(g) FROM generate_series(1, 700) g;
INSERT INTO payment SELECT g, 1 + g % 599, 1 + g % 2, 1 + g % 700, 0.99 + (g % 5), '2022-01-01 00:00:00+00'::timestamptz + g * interval '3 hours', pagila_ts(g) FROM generate_series(1, 600) g;
