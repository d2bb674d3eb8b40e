# The qres service image: `qres serve` with the shipped model (no torch, no training extra).
#   docker compose up -d qres   (see docs/serving.md)
FROM python:3.11-slim
WORKDIR /qres
COPY pyproject.toml README.md LICENSE ./
COPY qres ./qres
COPY training ./training
COPY es_config ./es_config
RUN pip install --no-cache-dir . && useradd --create-home qres
USER qres
ENV QRES_HOME=/home/qres/data HF_HUB_OFFLINE=1
EXPOSE 8000
CMD ["qres", "serve", "--host", "0.0.0.0", "--port", "8000"]
